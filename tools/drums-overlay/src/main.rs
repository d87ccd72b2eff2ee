//! drums-overlay: the session's overlayfs root, and the root images it is made on.
use drums::cli;
use drums_overlay::cli::{Args, Cmd, ImageCmd};

fn main() {
    cli::run("drums-overlay", |a: Args| {
        cli::require_root()?;
        match a.cmd {
            Cmd::Create { image, layers, size, ttl, identity } => {
                let s = drums::overlay::create(&drums::overlay::OverlayOptions { image, layers, tmpfs_bytes: size, ttl_s: ttl, userns: identity.userns() })?;
                drums::session_io::emit_session(&s)
            }
            Cmd::Remove { input } => {
                for mut s in cli::read_sessions(input.as_deref())? {
                    drums::overlay::remove(&s)?;
                    s.overlay = None;
                    drums::session_io::emit_session(&s)?;
                }
                Ok(())
            }
            Cmd::Image { cmd: ImageCmd::List } => drums::image::list().iter().try_for_each(cli::emit),
            Cmd::Image { cmd: ImageCmd::Verify { image } } => {
                let v = drums::image::verify(&image)?;
                cli::emit(&v)?;
                if v.equal {
                    Ok(())
                } else {
                    Err(drums::Error::CheckFailed(format!("image {}: its tree has digest {}, its record says {}", v.image.display(), v.digest_now, v.digest_recorded)))
                }
            }
            Cmd::Image { cmd: ImageCmd::Digest { dir } } => cli::emit(&drums::image::digest_report(&dir)?),
        }
    })
}
