//! The display, through xcb: screenshots with the cursor drawn in, screen size, pointer position, and the
//! window manager's client windows (EWMH) for activating and closing windows as wmctrl would.
//! Each call opens its own connection: nothing outlives a request, so a checkpoint never holds a
//! half-finished X conversation and a restarted X server is simply reconnected to.

use xcb::{x, XidNew};

pub type XResult<T> = std::result::Result<T, String>;

fn connect(display: &str, xfixes: bool) -> XResult<(xcb::Connection, x::Window, u16, u16)> {
    let opt: &[xcb::Extension] = if xfixes { &[xcb::Extension::XFixes] } else { &[] };
    let (conn, n) = xcb::Connection::connect_with_extensions(Some(display), &[], opt)
        .map_err(|e| format!("cannot connect to X display {display}: {e}"))?;
    let setup = conn.get_setup();
    let screen = setup.roots().nth(n.max(0) as usize).ok_or_else(|| format!("X display {display} has no screen {n}"))?;
    let (root, w, h) = (screen.root(), screen.width_in_pixels(), screen.height_in_pixels());
    Ok((conn, root, w, h))
}

fn xerr(what: &str) -> impl Fn(xcb::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

pub fn screen_size(display: &str) -> XResult<(u16, u16)> {
    let (_c, _r, w, h) = connect(display, false)?;
    Ok((w, h))
}

pub fn pointer(display: &str) -> XResult<(i16, i16)> {
    let (conn, root, _, _) = connect(display, false)?;
    let r = conn.wait_for_reply(conn.send_request(&x::QueryPointer { window: root })).map_err(xerr("QueryPointer"))?;
    Ok((r.root_x(), r.root_y()))
}

/// The whole screen as RGB, the cursor composited at the pointer, encoded as PNG.
pub fn screenshot_png(display: &str) -> XResult<(Vec<u8>, u32, u32)> {
    let (conn, root, w, h) = connect(display, true)?;
    let setup = conn.get_setup();
    let img = conn
        .wait_for_reply(conn.send_request(&x::GetImage {
            format: x::ImageFormat::ZPixmap,
            drawable: x::Drawable::Window(root),
            x: 0,
            y: 0,
            width: w,
            height: h,
            plane_mask: u32::MAX,
        }))
        .map_err(xerr("GetImage of the root window"))?;
    let bpp = setup
        .pixmap_formats()
        .iter()
        .find(|f| f.depth() == img.depth())
        .map(|f| f.bits_per_pixel())
        .unwrap_or(0);
    if bpp != 32 || !(img.depth() == 24 || img.depth() == 32) {
        return Err(format!("unsupported X image format: depth {} at {bpp} bits per pixel (24 or 32 at 32 expected)", img.depth()));
    }
    let lsb = setup.image_byte_order() == x::ImageOrder::LsbFirst;
    let data = img.data();
    let (wu, hu) = (w as usize, h as usize);
    if data.len() < wu * hu * 4 {
        return Err(format!("X returned {} bytes for a {w}x{h} image", data.len()));
    }
    let mut rgb = vec![0u8; wu * hu * 3];
    for (i, px) in data.chunks_exact(4).take(wu * hu).enumerate() {
        let (r, g, b) = if lsb { (px[2], px[1], px[0]) } else { (px[1], px[2], px[3]) };
        rgb[i * 3] = r;
        rgb[i * 3 + 1] = g;
        rgb[i * 3 + 2] = b;
    }
    // A screenshot without a cursor is still a screenshot: a missing XFixes only loses the cursor.
    if conn.active_extensions().any(|e| e == xcb::Extension::XFixes) {
        let _ = conn.wait_for_reply(conn.send_request(&xcb::xfixes::QueryVersion { client_major_version: 4, client_minor_version: 0 }));
        if let Ok(c) = conn.wait_for_reply(conn.send_request(&xcb::xfixes::GetCursorImage {})) {
            draw_cursor(&mut rgb, wu, hu, &c);
        }
    }
    let mut png_bytes = Vec::with_capacity(wu * hu / 4);
    {
        let mut enc = png::Encoder::new(&mut png_bytes, w as u32, h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fast);
        let mut wr = enc.write_header().map_err(|e| format!("PNG header: {e}"))?;
        wr.write_image_data(&rgb).map_err(|e| format!("PNG data: {e}"))?;
    }
    Ok((png_bytes, w as u32, h as u32))
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

fn atom(conn: &xcb::Connection, name: &str) -> XResult<x::Atom> {
    let r = conn
        .wait_for_reply(conn.send_request(&x::InternAtom { only_if_exists: false, name: name.as_bytes() }))
        .map_err(xerr("InternAtom"))?;
    Ok(r.atom())
}

fn property(conn: &xcb::Connection, w: x::Window, prop: x::Atom) -> Option<x::GetPropertyReply> {
    conn.wait_for_reply(conn.send_request(&x::GetProperty {
        delete: false,
        window: w,
        property: prop,
        r#type: x::ATOM_ANY,
        long_offset: 0,
        long_length: 1 << 20,
    }))
    .ok()
}

/// The window manager's client list (_NET_CLIENT_LIST) with titles and classes.
pub fn windows(display: &str) -> XResult<Vec<Window>> {
    let (conn, root, _, _) = connect(display, false)?;
    list(&conn, root)
}

fn list(conn: &xcb::Connection, root: x::Window) -> XResult<Vec<Window>> {
    let client_list = atom(conn, "_NET_CLIENT_LIST")?;
    let net_wm_name = atom(conn, "_NET_WM_NAME")?;
    let ids: Vec<u32> = match property(conn, root, client_list) {
        Some(r) if r.format() == 32 => r.value::<u32>().to_vec(),
        _ => return Err("the window manager publishes no _NET_CLIENT_LIST (is openbox running?)".into()),
    };
    let mut out = vec![];
    for id in ids {
        let w = x::Window::new(id);
        let title = property(conn, w, net_wm_name)
            .filter(|r| r.format() == 8 && !r.value::<u8>().is_empty())
            .or_else(|| property(conn, w, x::ATOM_WM_NAME))
            .map(|r| String::from_utf8_lossy(r.value::<u8>()).into_owned())
            .unwrap_or_default();
        let class_parts: Vec<String> = property(conn, w, x::ATOM_WM_CLASS)
            .map(|r| r.value::<u8>().split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()).collect())
            .unwrap_or_default();
        out.push(Window { id, title, class: class_parts.join("."), class_parts });
    }
    Ok(out)
}

/// The geometry of the first client window whose WM_CLASS (instance or class) equals `class`, ignoring case.
pub fn window_size_by_class(display: &str, class: &str) -> XResult<Option<(u16, u16)>> {
    let (conn, root, _, _) = connect(display, false)?;
    let want = class.to_lowercase();
    for w in list(&conn, root)? {
        if w.class_parts.iter().any(|p| p.to_lowercase() == want) {
            let g = conn
                .wait_for_reply(conn.send_request(&x::GetGeometry { drawable: x::Drawable::Window(x::Window::new(w.id)) }))
                .map_err(xerr("GetGeometry"))?;
            return Ok(Some((g.width(), g.height())));
        }
    }
    Ok(None)
}

/// wmctrl's matching: a case-insensitive substring by default; with `strict` (-F), the whole string,
/// case-sensitively. `by_class` (-x) matches WM_CLASS instead of the title.
pub fn matches(w: &Window, name: &str, strict: bool, by_class: bool) -> bool {
    let hay = if by_class { &w.class } else { &w.title };
    if strict {
        hay == name || (by_class && w.class_parts.iter().any(|p| p == name))
    } else {
        hay.to_lowercase().contains(&name.to_lowercase())
    }
}

pub enum WindowOp {
    Activate,
    Close,
}

/// Activate or close the first matching window via the EWMH client messages wmctrl sends.
/// Returns the window acted on, or None when nothing matched.
pub fn window_op(display: &str, name: &str, strict: bool, by_class: bool, op: WindowOp) -> XResult<Option<Window>> {
    let (conn, root, _, _) = connect(display, false)?;
    let Some(w) = list(&conn, root)?.into_iter().find(|w| matches(w, name, strict, by_class)) else {
        return Ok(None);
    };
    let (msg, data) = match op {
        // Source indication 2 (a pager): window managers honour it without focus-stealing checks.
        WindowOp::Activate => (atom(&conn, "_NET_ACTIVE_WINDOW")?, [2u32, x::CURRENT_TIME, 0, 0, 0]),
        WindowOp::Close => (atom(&conn, "_NET_CLOSE_WINDOW")?, [x::CURRENT_TIME, 2, 0, 0, 0]),
    };
    let target = x::Window::new(w.id);
    let ev = x::ClientMessageEvent::new(target, msg, x::ClientMessageData::Data32(data));
    conn.send_and_check_request(&x::SendEvent {
        propagate: false,
        destination: x::SendEventDest::Window(root),
        event_mask: x::EventMask::SUBSTRUCTURE_NOTIFY | x::EventMask::SUBSTRUCTURE_REDIRECT,
        event: &ev,
    })
    .map_err(|e| format!("SendEvent to the window manager: {e}"))?;
    if matches!(op, WindowOp::Activate) {
        // openbox maps and raises on _NET_ACTIVE_WINDOW; raising explicitly covers window managers that only focus.
        let _ = conn.send_and_check_request(&x::ConfigureWindow { window: target, value_list: &[x::ConfigWindow::StackMode(x::StackMode::Above)] });
    }
    Ok(Some(w))
}
