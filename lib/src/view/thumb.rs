//! A session's screen, small: what the overview page shows of each session a few times a second while
//! it is open. Read over X from the host (a thread that joins the session's network namespace reaches
//! Xvfb's abstract socket, as drums-ready does), scaled down by averaging, as PNG: the session runs
//! nothing for it.

use crate::error::{Error, Result};
use crate::record::Session;
use sha2::{Digest, Sha256};

pub struct Thumb {
    pub png: Vec<u8>,
    pub width: u32,
    pub height: u32,
    /// The first 16 hex digits of the SHA-256 of the scaled pixels: equal digests, equal pictures (the
    /// page's tests compare them; a browser need not decode the PNG).
    pub digest: String,
    /// Seconds to read the screen, and to scale and encode it (wall clock).
    pub grab_s: f64,
    pub encode_s: f64,
}

/// The session's screen scaled to `width` pixels wide (at most the screen's own width).

/// How long one thumbnail may wait for the session's X server.
const THUMBNAIL_X_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
pub fn thumbnail(session: &Session, width: u32) -> Result<Thumb> {
    let ns = session.ns()?;
    let display = session.desktop()?.display;
    if !crate::proc::alive(ns.init_pid, ns.init_start_time) {
        return Err(Error::bad_input(format!("session {}: its init is gone", session.id)));
    }
    // A parked sibling's processes are frozen (drums-pool(7)): its X server would never answer.
    // A session frozen otherwise (drums-cgroup freeze) likewise.
    if session.pool.as_ref().is_some_and(|p| p.frozen && p.taken_at.is_none()) || (session.cgroup.is_some() && crate::cgroup::frozen_state(session).is_ok_and(|f| f != "thawed")) {
        return Err(Error::bad_input(format!("session {}: frozen (parked in a pool, or drums-cgroup freeze); its screen is shown once it is thawed", session.id)));
    }
    let t0 = std::time::Instant::now();
    // An X server that stops answering (stopped, or starved) ends this thumbnail at its deadline instead
    // of holding one of the page's server threads.
    let deadline = t0 + THUMBNAIL_X_TIMEOUT;
    let shot = crate::nsenter::in_netns(ns.init_pid, move || crate::x11::connect(display, deadline)?.screenshot())?;
    let grab_s = t0.elapsed().as_secs_f64();
    let t1 = std::time::Instant::now();
    let (w, h, rgb) = scale(&shot, width);
    let digest = Sha256::digest(&rgb).iter().take(8).map(|b| format!("{b:02x}")).collect();
    let png = crate::x11::encode_png(w, h, &rgb)?;
    Ok(Thumb { png, width: w, height: h, digest, grab_s, encode_s: t1.elapsed().as_secs_f64() })
}

/// Box-filter `shot` down to `width` (keeping its aspect): each output pixel the mean of the source
/// pixels it covers, so a change of a few pixels still shows as a change of the thumbnail.
fn scale(shot: &crate::x11::Shot, width: u32) -> (u32, u32, Vec<u8>) {
    let (sw, sh) = (shot.width.max(1), shot.height.max(1));
    let w = width.clamp(1, sw);
    let h = ((sh as u64 * w as u64) / sw as u64).max(1) as u32;
    let mut rgb = vec![0u8; (w * h * 3) as usize];
    for y in 0..h {
        let (y0, y1) = ((y * sh / h), (((y + 1) * sh / h).max(y * sh / h + 1)).min(sh));
        for x in 0..w {
            let (x0, x1) = ((x * sw / w), (((x + 1) * sw / w).max(x * sw / w + 1)).min(sw));
            let mut acc = [0u32; 3];
            for sy in y0..y1 {
                let row = (sy * sw) as usize * 4;
                for sx in x0..x1 {
                    let p = &shot.bgrx[row + sx as usize * 4..row + sx as usize * 4 + 3];
                    acc[0] += p[2] as u32;
                    acc[1] += p[1] as u32;
                    acc[2] += p[0] as u32;
                }
            }
            let n = ((y1 - y0) * (x1 - x0)).max(1);
            let o = ((y * w + x) * 3) as usize;
            for k in 0..3 {
                rgb[o + k] = (acc[k] / n) as u8;
            }
        }
    }
    (w, h, rgb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_averages_the_pixels_each_output_pixel_covers() {
        // 4x2 BGRX: left half red, right half blue; scaled to 2 wide: one red, one blue pixel.
        let red = [0u8, 0, 255, 0];
        let blue = [255u8, 0, 0, 0];
        let bgrx: Vec<u8> = [red, red, blue, blue, red, red, blue, blue].concat();
        let (w, h, rgb) = scale(&crate::x11::Shot { width: 4, height: 2, bgrx }, 2);
        assert_eq!((w, h), (2, 1));
        assert_eq!(rgb, vec![255, 0, 0, 0, 0, 255]);
    }
}
