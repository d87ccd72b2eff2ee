//! Talking to a session's X server, through xcb: the one X client of Drums. The host's readiness check
//! (drums-ready, drums-desktop) stands on it from a process that has joined only the session's network
//! namespace, which reaches Xvfb's abstract socket (`@/tmp/.X11-unix/XN`) with DISPLAY=:N; the guest
//! (drums-guest) stands on it from inside the session for its screenshots, pointer and windows.

//!
//! No call here waits past its display's deadline: the connection is made on a socket of our own, and a
//! watchdog thread shuts that socket down when the deadline passes, so that xcb's blocking reads (the
//! connection setup, every reply) end with a connection error even when the X server never answers (a
//! stopped Xvfb accepts connections in the kernel's backlog and then says nothing).

use crate::error::{Error, IoContext, Result};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use xcb::{x, XidNew};

pub struct Display {
    // Declared first so that it is dropped first: its thread is stopped before the connection closes.
    watchdog: Watchdog,
    pub conn: xcb::Connection,
    pub root: x::Window,
    pub width: u16,
    pub height: u16,
    name: String,
}

/// A session's display `:N`, every call on it bounded by `deadline`.
pub fn connect(display: u32, deadline: Instant) -> Result<Display> {
    Display::open(&format!(":{display}"), false, deadline)
}

/// Shuts a socket down (both directions) once its deadline passes: whatever blocks on it then returns.
struct Watchdog {
    state: Arc<(Mutex<WatchState>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct WatchState {
    deadline: Instant,
    fired: bool,
    stop: bool,
}

impl Watchdog {
    /// Watch `socket` (a descriptor of its own, so that the number stays valid as long as the watchdog).
    fn new(socket: OwnedFd, deadline: Instant) -> Result<Watchdog> {
        let state = Arc::new((Mutex::new(WatchState { deadline, fired: false, stop: false }), Condvar::new()));
        let st = state.clone();
        let thread = std::thread::Builder::new()
            .name("x11-deadline".into())
            .spawn(move || {
                let (lock, cv) = &*st;
                let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
                while !g.stop {
                    let now = Instant::now();
                    if !g.fired && now >= g.deadline {
                        unsafe { libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR) };
                        g.fired = true;
                    }
                    let wait = if g.fired { Duration::from_secs(3600) } else { g.deadline - now };
                    g = cv.wait_timeout(g, wait).unwrap_or_else(|e| e.into_inner()).0;
                }
            })
            .map_err(|e| Error::failed(format!("start the X deadline thread: {e}")))?;
        Ok(Watchdog { state, thread: Some(thread) })
    }
    fn fired(&self) -> bool {
        self.state.0.lock().unwrap_or_else(|e| e.into_inner()).fired
    }
    fn set(&self, deadline: Instant) {
        self.state.0.lock().unwrap_or_else(|e| e.into_inner()).deadline = deadline;
        self.state.1.notify_all();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.state.0.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        self.state.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `:N` or `:N.S`: (N, S). Only local displays: Drums' X servers listen on no TCP port (-nolisten tcp).
fn parse_display(name: &str) -> Result<(u32, usize)> {
    let bad = || Error::failed(format!("X display {name}: expected :N or :N.S (a local display)"));
    let rest = name.strip_prefix(':').ok_or_else(bad)?;
    let (n, s) = rest.split_once('.').unwrap_or((rest, "0"));
    Ok((n.parse().map_err(|_| bad())?, s.parse().map_err(|_| bad())?))
}

/// A stream socket connected to X server `n`, as libxcb connects (the abstract socket, and the file in
/// /tmp/.X11-unix only when there is no abstract one), without blocking past `deadline`: a server whose
/// listen backlog is full (stopped, with connections piling up) refuses a non-blocking connect with
/// EAGAIN, which is retried on the same socket name until then (never on the file, which on the host
/// side could be another server's).
fn connect_socket(n: u32, deadline: Instant) -> Result<OwnedFd> {
    use nix::errno::Errno;
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let path = format!("/tmp/.X11-unix/X{n}");
    let attempt = |addr: &UnixAddr| -> std::result::Result<OwnedFd, Errno> {
        let fd = socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK, None)?;
        connect(fd.as_raw_fd(), addr)?;
        // Blocking again for xcb, which sets its own flags; the watchdog bounds its waits.
        let _ = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()));
        Ok(fd)
    };
    let err = |e: Errno| Error::failed(format!("connect to X display :{n}: {e}"));
    let abstract_addr = UnixAddr::new_abstract(path.as_bytes()).map_err(err)?;
    let mut addr = abstract_addr;
    loop {
        match attempt(&addr) {
            Ok(fd) => return Ok(fd),
            Err(Errno::EAGAIN) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5).min(deadline.saturating_duration_since(Instant::now()))),
            Err(Errno::ECONNREFUSED | Errno::ENOENT) if addr == abstract_addr => addr = UnixAddr::new(path.as_str()).map_err(err)?,
            Err(e) => return Err(err(e)),
        }
    }
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

impl Display {
    /// Connect to `name`, a DISPLAY value (`:N`). `cursor` also asks for XFixes, which `screenshot_png`
    /// needs to draw the cursor; a server without it still connects. The connection and every call on it
    /// end by `deadline` (see the module's comment); `set_deadline` moves it.
    pub fn open(name: &str, cursor: bool, deadline: Instant) -> Result<Display> {
        let (n, screen) = parse_display(name)?;
        let socket = connect_socket(n, deadline)?;
        let watched = socket.try_clone().map_err(|e| Error::failed(format!("dup the X socket: {e}")))?;
        let watchdog = Watchdog::new(watched, deadline)?;
        let optional: &[xcb::Extension] = if cursor { &[xcb::Extension::XFixes] } else { &[] };
        // No authorization: Drums' X servers run without -auth, and this is only ever a session's own.
        let conn = match xcb::Connection::connect_with_fd_and_extensions(socket, None, &[], optional) {
            Ok(c) => c,
            Err(_) if watchdog.fired() => return Err(Error::failed(format!("X display {name} did not complete the connection setup by its deadline (the X server does not answer)"))),
            Err(e) => return Err(Error::failed(format!("connect to X display {name}: {e}"))),
        };
        let (root, width, height) = {
            let s = conn.get_setup().roots().nth(screen).ok_or_else(|| Error::failed(format!("X display {name} has no screen {screen}")))?;
            (s.root(), s.width_in_pixels(), s.height_in_pixels())
        };
        Ok(Display { watchdog, conn, root, width, height, name: name.to_string() })
    }

    /// Bound every later call on this display by `deadline` instead. A display whose deadline has passed
    /// is closed: every call fails.
    pub fn set_deadline(&self, deadline: Instant) {
        self.watchdog.set(deadline);
    }

    /// The error of a failed X call: a deadline that passed is said as such.
    fn xerr<'a>(&'a self, what: &'a str) -> impl Fn(xcb::Error) -> Error + 'a {
        move |e| {
            if self.watchdog.fired() {
                Error::failed(format!("X {what} on {}: no answer by the deadline (the X server does not answer)", self.name))
            } else {
                Error::failed(format!("X {what}: {e}"))
            }
        }
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
        let reply = self.conn.wait_for_reply(c).map_err(self.xerr("GetImage"))?;
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
        let r = self.conn.wait_for_reply(self.conn.send_request(&x::QueryPointer { window: self.root })).map_err(self.xerr("QueryPointer"))?;
        Ok((r.root_x(), r.root_y()))
    }

    fn atom(&self, name: &str) -> Result<x::Atom> {
        let c = self.conn.send_request(&x::InternAtom { only_if_exists: false, name: name.as_bytes() });
        Ok(self.conn.wait_for_reply(c).map_err(self.xerr(&format!("InternAtom {name}")))?.atom())
    }

    /// A property of any type; None when it is not there or the window went away (an X protocol error);
    /// an error when the connection failed or its deadline passed.
    fn property(&self, w: x::Window, prop: x::Atom) -> Result<Option<x::GetPropertyReply>> {
        let c = self.conn.send_request(&x::GetProperty { delete: false, window: w, property: prop, r#type: x::ATOM_ANY, long_offset: 0, long_length: 1 << 20 });
        match self.conn.wait_for_reply(c) {
            Ok(r) => Ok(Some(r)),
            Err(xcb::Error::Protocol(_)) => Ok(None),
            Err(e) => Err(self.xerr("GetProperty")(e)),
        }
    }

    /// The window manager's client windows (_NET_CLIENT_LIST), each with its title (_NET_WM_NAME, else
    /// WM_NAME) and WM_CLASS. None while no window manager publishes the list.
    pub fn client_windows(&self) -> Result<Option<Vec<Window>>> {
        let client_list = self.atom("_NET_CLIENT_LIST")?;
        let net_wm_name = self.atom("_NET_WM_NAME")?;
        let ids: Vec<u32> = match self.property(self.root, client_list)? {
            Some(r) if r.format() == 32 => r.value::<u32>().to_vec(),
            _ => return Ok(None),
        };
        let text = |r: x::GetPropertyReply| String::from_utf8_lossy(r.value::<u8>()).into_owned();
        let mut windows = Vec::with_capacity(ids.len());
        for id in ids {
            let w = x::Window::new(id);
            let title = match self.property(w, net_wm_name)?.filter(|r| r.format() == 8 && !r.value::<u8>().is_empty()) {
                Some(r) => Some(r),
                None => self.property(w, x::ATOM_WM_NAME)?,
            }
            .map(text)
            .unwrap_or_default();
            let class_parts: Vec<String> = self
                .property(w, x::ATOM_WM_CLASS)?
                .map(|r| r.value::<u8>().split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()).collect())
                .unwrap_or_default();
            windows.push(Window { id, title, class: class_parts.join("."), class_parts });
        }
        Ok(Some(windows))
    }

    /// Titles of the window manager's client windows; none while no window manager runs.
    pub fn client_titles(&self) -> Result<Vec<String>> {
        Ok(self.client_windows()?.unwrap_or_default().into_iter().map(|w| w.title).collect())
    }

    pub fn window_size(&self, w: &Window) -> Result<(u16, u16)> {
        let g = self.conn.wait_for_reply(self.conn.send_request(&x::GetGeometry { drawable: x::Drawable::Window(x::Window::new(w.id)) })).map_err(self.xerr("GetGeometry"))?;
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
            .map_err(|e| self.xerr("SendEvent to the window manager")(e.into()))?;
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
    fn only_local_displays_are_read() {
        assert_eq!(parse_display(":0").unwrap(), (0, 0));
        assert_eq!(parse_display(":12.1").unwrap(), (12, 1));
        for bad in ["0", "host:0", ":", ":x", ":0.y"] {
            assert!(parse_display(bad).is_err(), "{bad}");
        }
    }

    /// A listener that accepts (the kernel's backlog does) and never answers, as a stopped X server:
    /// the connection setup ends at the deadline with an error saying so.
    #[test]
    fn a_server_that_never_answers_ends_the_connection_at_the_deadline() {
        use std::os::linux::net::SocketAddrExt;
        let n = 4000 + std::process::id() % 1000;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(format!("/tmp/.X11-unix/X{n}")).unwrap();
        let _silent = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        let t0 = std::time::Instant::now();
        let e = Display::open(&format!(":{n}"), false, t0 + Duration::from_millis(300)).err().expect("no X server answered");
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(300) && took < Duration::from_millis(800), "{took:?}");
        assert!(e.to_string().contains("does not answer"), "{e}");
    }

    #[test]
    fn changed_pixels_are_counted_on_colour_alone() {
        // Four pixels: blank (the unused byte set, which must not count), blank, red, a blue-ish one.
        let bgrx = vec![0x30, 0x20, 0x10, 0xff, 0x30, 0x20, 0x10, 0x00, 0x00, 0x00, 0xff, 0x00, 0x31, 0x20, 0x10, 0x00];
        let shot = Shot { width: 2, height: 2, bgrx };
        assert_eq!(shot.changed_fraction([0x10, 0x20, 0x30]), 0.5);
        assert_eq!(&shot.rgb()[..6], &[0x10, 0x20, 0x30, 0x10, 0x20, 0x30]);
    }
}
