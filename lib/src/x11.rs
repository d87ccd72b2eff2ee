//! Talking to a session's X server, through xcb: the one X client of Drums. The host's readiness check
//! (drums-ready, drums-desktop) stands on it from a process that has joined only the session's network
//! namespace, which reaches Xvfb's abstract socket (`@/tmp/.X11-unix/XN`) with DISPLAY=:N; the guest
//! (drums-guest) stands on it from inside the session for its screenshots, pointer and windows.

use crate::error::{Error, IoContext, Result};
use std::io::Write;
use std::path::Path;
use xcb::{x, XidNew};

pub struct Display {
    pub conn: xcb::Connection,
    pub root: x::Window,
    pub width: u16,
    pub height: u16,
}

/// A session's display `:N`.
pub fn connect(display: u32) -> Result<Display> {
    Display::open(&format!(":{display}"), false)
}

/// A screenshot as the X server sent it: 32 bits per pixel, blue, green, red, unused. Kept that way
/// because the readiness rule only compares pixels; RGB is made only for a PNG.
pub struct Shot {
    pub width: u32,
    pub height: u32,
    pub bgrx: Vec<u8>,
}

/// A top-level client window as the window manager lists it.
#[derive(Debug, Clone)]
pub struct Window {
    pub id: u32,
    pub title: String,
    /// WM_CLASS as wmctrl -x shows it: `instance.class`.
    pub class: String,
    /// WM_CLASS's parts, instance and class.
    pub class_parts: Vec<String>,
}

/// What a window manager is asked to do with a client window (EWMH client messages, as wmctrl sends them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WindowOp {
    Activate,
    Close,
}

fn xerr(what: &str) -> impl Fn(xcb::Error) -> Error + '_ {
    move |e| Error::failed(format!("X {what}: {e}"))
}

impl Display {
    /// Connect to `name`, a DISPLAY value (`:N`). `cursor` also asks for XFixes, which `screenshot_png`
    /// needs to draw the cursor; a server without it still connects.
    pub fn open(name: &str, cursor: bool) -> Result<Display> {
        let optional: &[xcb::Extension] = if cursor { &[xcb::Extension::XFixes] } else { &[] };
        let (conn, n) = xcb::Connection::connect_with_extensions(Some(name), &[], optional)
            .map_err(|e| Error::failed(format!("connect to X display {name}: {e}")))?;
        let (root, width, height) = {
            let screen = conn.get_setup().roots().nth(n.max(0) as usize).ok_or_else(|| Error::failed(format!("X display {name} has no screen {n}")))?;
            (screen.root(), screen.width_in_pixels(), screen.height_in_pixels())
        };
        Ok(Display { conn, root, width, height })
    }

    /// Rows `y..y + height` of the root window, handed to `f` as BGRX whatever the server's byte order.
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
        let reply = self.conn.wait_for_reply(c).map_err(xerr("GetImage"))?;
        let setup = self.conn.get_setup();
        let bpp = setup.pixmap_formats().iter().find(|f| f.depth() == reply.depth()).map_or(0, |f| f.bits_per_pixel());
        if bpp != 32 || !(reply.depth() == 24 || reply.depth() == 32) {
            return Err(Error::failed(format!("unsupported X image format: depth {} at {bpp} bits per pixel (24 or 32 at 32 expected)", reply.depth())));
        }
        let src = reply.data();
        let n = self.width as usize * height as usize;
        if src.len() < n * 4 {
            return Err(Error::failed(format!("X GetImage returned {} bytes for {n} pixels", src.len())));
        }
        if setup.image_byte_order() == x::ImageOrder::LsbFirst {
            return Ok(f(&src[..n * 4]));
        }
        // Most significant byte first (unused, red, green, blue): reversed into the BGRX everything here reads.
        let bgrx: Vec<u8> = src[..n * 4].chunks_exact(4).flat_map(|p| [p[3], p[2], p[1], p[0]]).collect();
        Ok(f(&bgrx))
    }

    pub fn screenshot(&self) -> Result<Shot> {
        let bgrx = self.with_rows(0, self.height, |b| b.to_vec())?;
        Ok(Shot { width: self.width as u32, height: self.height as u32, bgrx })
    }

    /// The whole screen as PNG (RGB), the cursor drawn in at the pointer when the display was opened with
    /// `cursor` and the server has XFixes: a screenshot without a cursor is still a screenshot.
    pub fn screenshot_png(&self) -> Result<Vec<u8>> {
        let shot = self.screenshot()?;
        let mut rgb = shot.rgb();
        if self.conn.active_extensions().any(|e| e == xcb::Extension::XFixes) {
            let _ = self.conn.wait_for_reply(self.conn.send_request(&xcb::xfixes::QueryVersion { client_major_version: 4, client_minor_version: 0 }));
            if let Ok(c) = self.conn.wait_for_reply(self.conn.send_request(&xcb::xfixes::GetCursorImage {})) {
                draw_cursor(&mut rgb, self.width as usize, self.height as usize, &c);
            }
        }
        let mut png_bytes = Vec::with_capacity(rgb.len() / 3);
        write_png(&mut png_bytes, shot.width, shot.height, &rgb).map_err(|e| Error::failed(format!("PNG: {e}")))?;
        Ok(png_bytes)
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

    pub fn pointer(&self) -> Result<(i16, i16)> {
        let r = self.conn.wait_for_reply(self.conn.send_request(&x::QueryPointer { window: self.root })).map_err(xerr("QueryPointer"))?;
        Ok((r.root_x(), r.root_y()))
    }

    fn atom(&self, name: &str) -> Result<x::Atom> {
        let c = self.conn.send_request(&x::InternAtom { only_if_exists: false, name: name.as_bytes() });
        Ok(self.conn.wait_for_reply(c).map_err(|e| Error::failed(format!("X InternAtom {name}: {e}")))?.atom())
    }

    /// A property of any type; None when it is not there or the window went away.
    fn property(&self, w: x::Window, prop: x::Atom) -> Option<x::GetPropertyReply> {
        let c = self.conn.send_request(&x::GetProperty { delete: false, window: w, property: prop, r#type: x::ATOM_ANY, long_offset: 0, long_length: 1 << 20 });
        self.conn.wait_for_reply(c).ok()
    }

    /// The window manager's client windows (_NET_CLIENT_LIST), each with its title (_NET_WM_NAME, else
    /// WM_NAME) and WM_CLASS. None while no window manager publishes the list.
    pub fn client_windows(&self) -> Result<Option<Vec<Window>>> {
        let client_list = self.atom("_NET_CLIENT_LIST")?;
        let net_wm_name = self.atom("_NET_WM_NAME")?;
        let ids: Vec<u32> = match self.property(self.root, client_list) {
            Some(r) if r.format() == 32 => r.value::<u32>().to_vec(),
            _ => return Ok(None),
        };
        let text = |r: x::GetPropertyReply| String::from_utf8_lossy(r.value::<u8>()).into_owned();
        let windows = ids
            .into_iter()
            .map(|id| {
                let w = x::Window::new(id);
                let title = self
                    .property(w, net_wm_name)
                    .filter(|r| r.format() == 8 && !r.value::<u8>().is_empty())
                    .or_else(|| self.property(w, x::ATOM_WM_NAME))
                    .map(text)
                    .unwrap_or_default();
                let class_parts: Vec<String> = self
                    .property(w, x::ATOM_WM_CLASS)
                    .map(|r| r.value::<u8>().split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()).collect())
                    .unwrap_or_default();
                Window { id, title, class: class_parts.join("."), class_parts }
            })
            .collect();
        Ok(Some(windows))
    }

    /// Titles of the window manager's client windows; none while no window manager runs.
    pub fn client_titles(&self) -> Result<Vec<String>> {
        Ok(self.client_windows()?.unwrap_or_default().into_iter().map(|w| w.title).collect())
    }

    pub fn window_size(&self, w: &Window) -> Result<(u16, u16)> {
        let g = self.conn.wait_for_reply(self.conn.send_request(&x::GetGeometry { drawable: x::Drawable::Window(x::Window::new(w.id)) })).map_err(xerr("GetGeometry"))?;
        Ok((g.width(), g.height()))
    }

    /// Ask the window manager to activate or close `w`, with the client message wmctrl sends.
    pub fn window_op(&self, w: &Window, op: WindowOp) -> Result<()> {
        let (msg, data) = match op {
            // Source indication 2 (a pager): window managers honour it without focus-stealing checks.
            WindowOp::Activate => (self.atom("_NET_ACTIVE_WINDOW")?, [2u32, x::CURRENT_TIME, 0, 0, 0]),
            WindowOp::Close => (self.atom("_NET_CLOSE_WINDOW")?, [x::CURRENT_TIME, 2, 0, 0, 0]),
        };
        let target = x::Window::new(w.id);
        let ev = x::ClientMessageEvent::new(target, msg, x::ClientMessageData::Data32(data));
        self.conn
            .send_and_check_request(&x::SendEvent {
                propagate: false,
                destination: x::SendEventDest::Window(self.root),
                event_mask: x::EventMask::SUBSTRUCTURE_NOTIFY | x::EventMask::SUBSTRUCTURE_REDIRECT,
                event: &ev,
            })
            .map_err(|e| Error::failed(format!("SendEvent to the window manager: {e}")))?;
        if op == WindowOp::Activate {
            // openbox maps and raises on _NET_ACTIVE_WINDOW; raising explicitly covers window managers that only focus.
            let _ = self.conn.send_and_check_request(&x::ConfigureWindow { window: target, value_list: &[x::ConfigWindow::StackMode(x::StackMode::Above)] });
        }
        Ok(())
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
        write_png(std::io::BufWriter::new(f), self.width, self.height, &self.rgb()).map_err(|e| Error::failed(format!("{}: png: {e}", path.display())))
    }
}

/// 8-bit RGB as PNG in memory (drums-view's thumbnails).
pub fn encode_png(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(rgb.len() / 4);
    write_png(&mut out, width, height, rgb).map_err(|e| Error::failed(format!("PNG: {e}")))?;
    Ok(out)
}

/// 8-bit RGB as PNG, compressed for speed: a screenshot is read once.
fn write_png(out: impl Write, width: u32, height: u32, rgb: &[u8]) -> std::result::Result<(), png::EncodingError> {
    let mut enc = png::Encoder::new(out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    let mut w = enc.write_header()?;
    w.write_image_data(rgb)?;
    w.finish()
}

/// Composite the ARGB (premultiplied) cursor image with its hot spot on the pointer position.
fn draw_cursor(rgb: &mut [u8], w: usize, h: usize, c: &xcb::xfixes::GetCursorImageReply) {
    let (cw, ch) = (c.width() as i64, c.height() as i64);
    let x0 = c.x() as i64 - c.xhot() as i64;
    let y0 = c.y() as i64 - c.yhot() as i64;
    let pixels = c.cursor_image();
    for cy in 0..ch {
        for cx in 0..cw {
            let (px, py) = (x0 + cx, y0 + cy);
            if px < 0 || py < 0 || px >= w as i64 || py >= h as i64 {
                continue;
            }
            let Some(&argb) = pixels.get((cy * cw + cx) as usize) else { continue };
            let a = (argb >> 24) & 0xff;
            if a == 0 {
                continue;
            }
            let o = (py as usize * w + px as usize) * 3;
            for (k, shift) in [16u32, 8, 0].iter().enumerate() {
                let src = (argb >> shift) & 0xff;
                let dst = rgb[o + k] as u32;
                rgb[o + k] = (src + dst * (255 - a) / 255).min(255) as u8;
            }
        }
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
