//! A VNC client for the tests (RFB 3.8, no authentication, raw encoding) and what its screens are
//! compared with: the guest's /screenshot, decoded. tests/view.rs and tests/osworld_harness.rs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A screen as 8-bit RGB.
pub struct Screen {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<u8>,
}

fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).unwrap_or_else(|e| panic!("RFB: reading {n} bytes: {e}"));
    b
}

/// The whole screen through RFB 3.8 with no authentication, asking for raw 32-bit true colour only.
pub fn rfb_screen(addr: &str) -> Screen {
    let mut s = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5)).unwrap_or_else(|e| panic!("connect to the VNC server {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let version = read_exact(&mut s, 12);
    assert!(version.starts_with(b"RFB 003."), "not an RFB server: {:?}", String::from_utf8_lossy(&version));
    s.write_all(b"RFB 003.008\n").unwrap();
    let n = read_exact(&mut s, 1)[0] as usize;
    assert!(n > 0, "the server refused the connection");
    let types = read_exact(&mut s, n);
    assert!(types.contains(&1), "the server offers no security type None: {types:?}");
    s.write_all(&[1]).unwrap();
    assert_eq!(read_exact(&mut s, 4), vec![0, 0, 0, 0], "security result");
    s.write_all(&[1]).unwrap(); // ClientInit, shared
    let init = read_exact(&mut s, 24);
    let (width, height) = (u16::from_be_bytes([init[0], init[1]]) as usize, u16::from_be_bytes([init[2], init[3]]) as usize);
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]) as usize;
    read_exact(&mut s, name_len);
    // SetPixelFormat: 32 bpp, depth 24, little endian, true colour, 255 each, red at 16, green 8, blue 0.
    let mut pf = vec![0u8, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0];
    s.write_all(&pf).unwrap();
    pf.clear();
    // SetEncodings: raw only.
    s.write_all(&[2, 0, 0, 1, 0, 0, 0, 0]).unwrap();
    // FramebufferUpdateRequest, not incremental, the whole screen.
    let mut req = vec![3u8, 0, 0, 0, 0, 0];
    req.extend_from_slice(&(width as u16).to_be_bytes());
    req.extend_from_slice(&(height as u16).to_be_bytes());
    s.write_all(&req).unwrap();
    let mut rgb = vec![0u8; width * height * 3];
    let mut covered = 0usize;
    while covered < width * height {
        let kind = read_exact(&mut s, 1)[0];
        match kind {
            0 => {
                let h = read_exact(&mut s, 3);
                let rects = u16::from_be_bytes([h[1], h[2]]);
                for _ in 0..rects {
                    let r = read_exact(&mut s, 12);
                    let be = |i: usize| u16::from_be_bytes([r[i], r[i + 1]]) as usize;
                    let (x, y, w, h) = (be(0), be(2), be(4), be(6));
                    let enc = i32::from_be_bytes([r[8], r[9], r[10], r[11]]);
                    assert_eq!(enc, 0, "the server sent encoding {enc}, not raw");
                    let px = read_exact(&mut s, w * h * 4);
                    for row in 0..h {
                        for col in 0..w {
                            let p = &px[(row * w + col) * 4..];
                            let o = ((y + row) * width + x + col) * 3;
                            rgb[o..o + 3].copy_from_slice(&[p[2], p[1], p[0]]);
                        }
                    }
                    covered += w * h;
                }
            }
            2 => {} // Bell
            3 => {
                let h = read_exact(&mut s, 7);
                read_exact(&mut s, u32::from_be_bytes([h[3], h[4], h[5], h[6]]) as usize);
            }
            other => panic!("RFB: unexpected server message {other}"),
        }
    }
    Screen { width, height, rgb }
}

/// GET `url` (http://host:port/path): status and body, as bytes.
pub fn get_bytes(url: &str) -> (u16, Vec<u8>) {
    let rest = url.strip_prefix("http://").unwrap();
    let (hostport, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut s = TcpStream::connect_timeout(&hostport.parse::<SocketAddr>().unwrap(), Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = vec![];
    let _ = s.read_to_end(&mut out);
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP response");
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out[split + 4..].to_vec())
}

pub fn decode_png(bytes: &[u8]) -> Screen {
    let mut dec = png::Decoder::new(std::io::Cursor::new(bytes));
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut r = dec.read_info().expect("a PNG");
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    let ch = info.color_type.samples();
    let rgb = buf[..info.buffer_size()].chunks(ch).flat_map(|p| [p[0], p[1], p[2]]).collect();
    Screen { width: info.width as usize, height: info.height as usize, rgb }
}

/// The guest's own screenshot of the session (GET /screenshot).
pub fn guest_screen(s: &drums::record::Session) -> Screen {
    let url = s.desktop.as_ref().unwrap().guest_url.clone().unwrap();
    let (status, body) = get_bytes(&format!("{url}/screenshot"));
    assert_eq!(status, 200, "guest /screenshot");
    decode_png(&body)
}

/// Fraction of pixels whose colour differs by more than `tol` in any channel.
pub fn differing(a: &Screen, b: &Screen, tol: u8) -> f64 {
    assert_eq!((a.width, a.height), (b.width, b.height), "screen sizes");
    let n = a.width * a.height;
    let d = a.rgb.chunks(3).zip(b.rgb.chunks(3)).filter(|(p, q)| p.iter().zip(q.iter()).any(|(x, y)| x.abs_diff(*y) > tol)).count();
    d as f64 / n as f64
}

