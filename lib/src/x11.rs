//! Talking to a session's X server from the host: a process that has joined only the session's network
//! namespace reaches Xvfb's abstract socket (`@/tmp/.X11-unix/XN`) with DISPLAY=:N.

use crate::error::{Error, IoContext, Result};
use std::path::Path;
use xcb::x;

pub struct Display {
    pub conn: xcb::Connection,
    pub root: x::Window,
    pub width: u16,
    pub height: u16,
}

pub fn connect(display: u32) -> Result<Display> {
    let (conn, n) = xcb::Connection::connect(Some(&format!(":{display}"))).map_err(|e| Error::failed(format!("connect to X display :{display}: {e}")))?;
    let (root, width, height) = {
        let screen = conn.get_setup().roots().nth(n as usize).ok_or_else(|| Error::failed("X server has no screen"))?;
        (screen.root(), screen.width_in_pixels(), screen.height_in_pixels())
    };
    Ok(Display { conn, root, width, height })
}

/// A screenshot as the X server sent it: 32 bits per pixel, blue, green, red, unused. Kept that way
/// because the readiness rule only compares pixels; RGB is made only for a PNG.
pub struct Shot {
    pub width: u32,
    pub height: u32,
    pub bgrx: Vec<u8>,
}

impl Display {
    /// Rows `y..y + height` of the root window, handed to `f` as the server sent them (BGRX).
    fn with_rows<T>(&self, y: u16, height: u16, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        let c = self.conn.send_request(&x::GetImage {
            format: x::ImageFormat::ZPixmap,
            drawable: x::Drawable::Window(self.root),
            x: 0,
            y: y as i16,
            width: self.width,
            height,
            plane_mask: u32::MAX,
        });
        let reply = self.conn.wait_for_reply(c).map_err(|e| Error::failed(format!("X GetImage: {e}")))?;
        let src = reply.data();
        let n = self.width as usize * height as usize;
        if src.len() < n * 4 {
            return Err(Error::failed(format!("X GetImage returned {} bytes for {n} pixels: only 24/32-bit displays are supported", src.len())));
        }
        Ok(f(&src[..n * 4]))
    }

    pub fn screenshot(&self) -> Result<Shot> {
        let bgrx = self.with_rows(0, self.height, |b| b.to_vec())?;
        Ok(Shot { width: self.width as u32, height: self.height as u32, bgrx })
    }

    /// Pixels of the screen that differ from `blank`, read in bands of a tenth of the screen from the
    /// top, stopping as soon as more than `enough` are found: (pixels found, rows read). A ready screen
    /// is then judged on the first bands instead of an 8 MB image (1920x1080).
    pub fn count_changed(&self, blank: [u8; 3], enough: usize) -> Result<(usize, u16)> {
        let band = (self.height / 10).max(1);
        let (mut changed, mut y) = (0, 0);
        while y < self.height && changed <= enough {
            let h = band.min(self.height - y);
            changed += self.with_rows(y, h, |b| changed_pixels(b, blank))?;
            y += h;
        }
        Ok((changed, y))
    }

    fn atom(&self, name: &str) -> Result<x::Atom> {
        let c = self.conn.send_request(&x::InternAtom { only_if_exists: false, name: name.as_bytes() });
        Ok(self.conn.wait_for_reply(c).map_err(|e| Error::failed(format!("X InternAtom {name}: {e}")))?.atom())
    }

    /// Titles of the window manager's client windows (_NET_CLIENT_LIST; _NET_WM_NAME, else WM_NAME).
    pub fn client_titles(&self) -> Result<Vec<String>> {
        let list = self.atom("_NET_CLIENT_LIST")?;
        let net_name = self.atom("_NET_WM_NAME")?;
        let utf8 = self.atom("UTF8_STRING")?;
        let c = self.conn.send_request(&x::GetProperty { delete: false, window: self.root, property: list, r#type: x::ATOM_WINDOW, long_offset: 0, long_length: 1024 });
        let reply = self.conn.wait_for_reply(c).map_err(|e| Error::failed(format!("X GetProperty _NET_CLIENT_LIST: {e}")))?;
        let windows: Vec<x::Window> = reply.value::<x::Window>().to_vec();
        let mut titles = vec![];
        for w in windows {
            let c = self.conn.send_request(&x::GetProperty { delete: false, window: w, property: net_name, r#type: utf8, long_offset: 0, long_length: 1024 });
            let mut t = match self.conn.wait_for_reply(c) {
                Ok(r) => String::from_utf8_lossy(r.value::<u8>()).into_owned(),
                Err(_) => continue, // the window went away between the two requests
            };
            if t.is_empty() {
                let c = self.conn.send_request(&x::GetProperty { delete: false, window: w, property: x::ATOM_WM_NAME, r#type: x::ATOM_STRING, long_offset: 0, long_length: 1024 });
                if let Ok(r) = self.conn.wait_for_reply(c) {
                    t = String::from_utf8_lossy(r.value::<u8>()).into_owned();
                }
            }
            titles.push(t);
        }
        Ok(titles)
    }
}

impl Shot {
    /// Fraction of pixels that differ from `blank` (RGB).
    pub fn changed_fraction(&self, blank: [u8; 3]) -> f64 {
        let n = (self.width * self.height) as usize;
        if n == 0 {
            return 0.0;
        }
        changed_pixels(&self.bgrx, blank) as f64 / n as f64
    }

    /// The pixels as 8-bit RGB.
    pub fn rgb(&self) -> Vec<u8> {
        let mut rgb = Vec::with_capacity(self.bgrx.len() / 4 * 3);
        for p in self.bgrx.chunks_exact(4) {
            rgb.extend_from_slice(&[p[2], p[1], p[0]]);
        }
        rgb
    }

    pub fn save_png(&self, path: &Path) -> Result<()> {
        let f = std::fs::File::create(path).ctx("create", path)?;
        let mut enc = png::Encoder::new(std::io::BufWriter::new(f), self.width, self.height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fast);
        let mut w = enc.write_header().map_err(|e| Error::failed(format!("{}: png: {e}", path.display())))?;
        w.write_image_data(&self.rgb()).map_err(|e| Error::failed(format!("{}: png: {e}", path.display())))?;
        w.finish().map_err(|e| Error::failed(format!("{}: png: {e}", path.display())))
    }
}

/// Pixels of a BGRX image that differ from `blank` (RGB) in colour.
fn changed_pixels(bgrx: &[u8], blank: [u8; 3]) -> usize {
    // Whole pixels as words, the unused byte masked off: several times faster than byte triples.
    let blank = u32::from_le_bytes([blank[2], blank[1], blank[0], 0]);
    bgrx.chunks_exact(4).filter(|p| u32::from_le_bytes([p[0], p[1], p[2], p[3]]) & 0x00ff_ffff != blank).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_pixels_are_counted_on_colour_alone() {
        // Four pixels: blank (the unused byte set, which must not count), blank, red, a blue-ish one.
        let bgrx = vec![0x30, 0x20, 0x10, 0xff, 0x30, 0x20, 0x10, 0x00, 0x00, 0x00, 0xff, 0x00, 0x31, 0x20, 0x10, 0x00];
        let shot = Shot { width: 2, height: 2, bgrx };
        assert_eq!(shot.changed_fraction([0x10, 0x20, 0x30]), 0.5);
        assert_eq!(&shot.rgb()[..6], &[0x10, 0x20, 0x30, 0x10, 0x20, 0x30]);
    }
}
