//! drums-sweep: destroy the sessions named on input, or (with no input) find and remove orphans.
use drums::destroy::{self, DestroyOptions};
use drums_sweep::cli::Args;

fn main() {
    drums::cli::run("drums-sweep", |a: Args| {
        drums::cli::require_root()?;
        if a.report {
            return drums::cli::emit(&destroy::inventory::take());
        }
        if a.prune_root_images {
            return drums::cli::emit(&drums::image::prune(a.dry_run)?);
        }
        destroy::request::run(&destroy::request::Request {
            input: a.input,
            session_ids: a.sessions,
            state_dirs: a.state_dirs,
            orphans: a.orphans,
            destroy: DestroyOptions { remove_images: a.remove_images, dry_run: a.dry_run, kill_wait: a.kill_wait, ..DestroyOptions::default() },
            older_than: a.older_than,
            ttl: a.ttl,
        })
    })
}
