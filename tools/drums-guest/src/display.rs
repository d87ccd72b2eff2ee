//! The display as OSWorld's endpoints use it, on drums::x11: screenshots with the cursor drawn in, screen
//! size, pointer position, and the window manager's client windows, matched and acted on as wmctrl would.
//! Each call opens its own connection: nothing outlives a request, so a checkpoint never holds a
//! half-finished X conversation and a restarted X server is simply reconnected to. Errors are the text an
//! answer carries.

pub use drums::x11::{Window, WindowOp};
use drums::x11::Display;

pub type XResult<T> = std::result::Result<T, String>;

/// How long one request's X work (connecting included) may take: a screenshot takes tens of
/// milliseconds; an X server that does not answer in this long is stopped or wedged, and the request gets
/// its error instead of waiting with it.
pub const X_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Open `display` (with XFixes when `cursor`), run `f` on it, and close it, all within X_TIMEOUT.
fn with_display<T>(display: &str, cursor: bool, f: impl FnOnce(&Display) -> drums::Result<T>) -> XResult<T> {
    Display::open(display, cursor, std::time::Instant::now() + X_TIMEOUT).and_then(|d| f(&d)).map_err(|e| e.to_string())
}

pub fn screen_size(display: &str) -> XResult<(u16, u16)> {
    with_display(display, false, |d| Ok((d.width, d.height)))
}

pub fn pointer(display: &str) -> XResult<(i16, i16)> {
    with_display(display, false, Display::pointer)
}

/// The whole screen as PNG, the cursor composited at the pointer.
pub fn screenshot_png(display: &str) -> XResult<Vec<u8>> {
    with_display(display, true, Display::screenshot_png)
}

fn listed(d: &Display) -> drums::Result<Vec<Window>> {
    d.client_windows()?.ok_or_else(|| drums::Error::failed("the window manager publishes no _NET_CLIENT_LIST (is openbox running?)"))
}

/// The window manager's client list (_NET_CLIENT_LIST) with titles and classes.
pub fn windows(display: &str) -> XResult<Vec<Window>> {
    with_display(display, false, listed)
}

/// The geometry of the first client window whose WM_CLASS (instance or class) equals `class`, ignoring case.
pub fn window_size_by_class(display: &str, class: &str) -> XResult<Option<(u16, u16)>> {
    let want = class.to_lowercase();
    with_display(display, false, |d| match listed(d)?.iter().find(|w| w.class_parts.iter().any(|p| p.to_lowercase() == want)) {
        Some(w) => d.window_size(w).map(Some),
        None => Ok(None),
    })
}

/// wmctrl's matching: a case-insensitive substring by default; with `strict` (-F), the whole string,
/// case-sensitively. `by_class` (-x) matches WM_CLASS instead of the title.
fn matches(w: &Window, name: &str, strict: bool, by_class: bool) -> bool {
    let hay = if by_class { &w.class } else { &w.title };
    if strict {
        hay == name || (by_class && w.class_parts.iter().any(|p| p == name))
    } else {
        hay.to_lowercase().contains(&name.to_lowercase())
    }
}

/// Activate or close the first matching window via the EWMH client messages wmctrl sends.
/// Returns the window acted on, or None when nothing matched.
pub fn window_op(display: &str, name: &str, strict: bool, by_class: bool, op: WindowOp) -> XResult<Option<Window>> {
    with_display(display, false, |d| {
        let Some(w) = listed(d)?.into_iter().find(|w| matches(w, name, strict, by_class)) else {
            return Ok(None);
        };
        d.window_op(&w, op)?;
        Ok(Some(w))
    })
}
