//! CRIU's image files, read and rewritten field by field: the few fields drums-ckpt edits after a dump
//! (`mapped`), every other field carried over byte for byte.
//!
//! A protobuf image is two little-endian u32 magics (CRIU's common magic, then the image's own) and a
//! stream of entries, each a u32 length and that many bytes of one protobuf message. A `pages-N.img` is
//! raw pages in the order of its pagemap's present entries.

use crate::error::{Error, IoContext, Result};
use std::path::Path;

/// The first magic of every protobuf image CRIU 4 writes.
pub const COMMON_MAGIC: u32 = 0x5456_4319;

/// One protobuf image: its two magics and its entries, undecoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub magic: [u32; 2],
    pub entries: Vec<Vec<u8>>,
}

impl Image {
    pub fn read(path: &Path) -> Result<Image> {
        let d = std::fs::read(path).ctx("read", path)?;
        let bad = |what: &str| Error::failed(format!("{}: not a CRIU image ({what})", path.display()));
        if d.len() < 8 {
            return Err(bad("shorter than its magic"));
        }
        let word = |i: usize| u32::from_le_bytes(d[i..i + 4].try_into().unwrap());
        let magic = [word(0), word(4)];
        if magic[0] != COMMON_MAGIC {
            return Err(bad("wrong magic"));
        }
        let (mut i, mut entries) = (8, vec![]);
        while i < d.len() {
            if i + 4 > d.len() {
                return Err(bad("truncated entry length"));
            }
            let n = word(i) as usize;
            i += 4;
            if i + n > d.len() {
                return Err(bad("truncated entry"));
            }
            entries.push(d[i..i + n].to_vec());
            i += n;
        }
        Ok(Image { magic, entries })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(8 + self.entries.iter().map(|e| e.len() + 4).sum::<usize>());
        o.extend(self.magic[0].to_le_bytes());
        o.extend(self.magic[1].to_le_bytes());
        for e in &self.entries {
            o.extend((e.len() as u32).to_le_bytes());
            o.extend(e);
        }
        o
    }
}

/// Write `bytes` to `path` through a temporary file beside it, so a crash leaves the old file or the new.
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("img.new");
    std::fs::write(&tmp, bytes).ctx("write", &tmp)?;
    std::fs::rename(&tmp, path).ctx("rename into place", path)
}

/// A field's value as it is on the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(Vec<u8>),
    Fixed32([u8; 4]),
}

/// A protobuf message as its fields in wire order (repeated fields appear once per value).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message(pub Vec<(u32, Value)>);

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let c = *b.get(*i)?;
        *i += 1;
        v |= u64::from(c & 0x7f) << shift;
        if c < 0x80 {
            return Some(v);
        }
    }
    None
}

fn put_varint(o: &mut Vec<u8>, mut v: u64) {
    loop {
        let c = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            o.push(c);
            return;
        }
        o.push(c | 0x80);
    }
}

impl Message {
    pub fn parse(b: &[u8]) -> Result<Message> {
        let bad = || Error::failed("malformed protobuf message in a CRIU image");
        let (mut i, mut fields) = (0, vec![]);
        while i < b.len() {
            let key = varint(b, &mut i).ok_or_else(bad)?;
            let (field, wire) = ((key >> 3) as u32, key & 7);
            let take = |i: &mut usize, n: usize| -> Result<Vec<u8>> {
                let v = b.get(*i..*i + n).ok_or_else(bad)?.to_vec();
                *i += n;
                Ok(v)
            };
            let v = match wire {
                0 => Value::Varint(varint(b, &mut i).ok_or_else(bad)?),
                1 => Value::Fixed64(take(&mut i, 8)?.try_into().unwrap()),
                2 => {
                    let n = varint(b, &mut i).ok_or_else(bad)? as usize;
                    Value::Bytes(take(&mut i, n)?)
                }
                5 => Value::Fixed32(take(&mut i, 4)?.try_into().unwrap()),
                _ => return Err(bad()),
            };
            fields.push((field, v));
        }
        Ok(Message(fields))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut o = vec![];
        for (f, v) in &self.0 {
            let wire = match v {
                Value::Varint(_) => 0,
                Value::Fixed64(_) => 1,
                Value::Bytes(_) => 2,
                Value::Fixed32(_) => 5,
            };
            put_varint(&mut o, u64::from(*f) << 3 | wire);
            match v {
                Value::Varint(x) => put_varint(&mut o, *x),
                Value::Fixed64(x) => o.extend(x),
                Value::Bytes(x) => {
                    put_varint(&mut o, x.len() as u64);
                    o.extend(x);
                }
                Value::Fixed32(x) => o.extend(x),
            }
        }
        o
    }

    /// The first value of a varint field.
    pub fn varint(&self, field: u32) -> Option<u64> {
        self.0.iter().find_map(|(f, v)| match v {
            Value::Varint(x) if *f == field => Some(*x),
            _ => None,
        })
    }

    /// The first value of a length-delimited field (bytes, string, embedded message).
    pub fn bytes(&self, field: u32) -> Option<&[u8]> {
        self.0.iter().find_map(|(f, v)| match v {
            Value::Bytes(x) if *f == field => Some(x.as_slice()),
            _ => None,
        })
    }

    /// Set a varint field: its first occurrence is replaced, or the field is appended.
    pub fn set_varint(&mut self, field: u32, value: u64) {
        match self.0.iter_mut().find(|(f, _)| *f == field) {
            Some(slot) => slot.1 = Value::Varint(value),
            None => self.0.push((field, Value::Varint(value))),
        }
    }

    /// Set a length-delimited field the same way.
    pub fn set_bytes(&mut self, field: u32, value: Vec<u8>) {
        match self.0.iter_mut().find(|(f, _)| *f == field) {
            Some(slot) => slot.1 = Value::Bytes(value),
            None => self.0.push((field, Value::Bytes(value))),
        }
    }

    pub fn remove(&mut self, field: u32) {
        self.0.retain(|(f, _)| *f != field);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_edit_in_place() {
        let m = Message(vec![
            (1, Value::Varint(0x55c3_8a14_f000)),
            (4, Value::Varint(172)),
            (6, Value::Bytes(b"/usr/lib/chromium/chromium".to_vec())),
            (11, Value::Varint(3_995_983_358)),
            (11, Value::Varint(7)),
            (12, Value::Fixed32([1, 2, 3, 4])),
            (13, Value::Fixed64([9; 8])),
        ]);
        let b = m.encode();
        let back = Message::parse(&b).unwrap();
        assert_eq!(back, m);
        let mut e = back.clone();
        e.set_varint(4, 1000);
        e.set_varint(20, 5);
        e.remove(11);
        e.set_bytes(6, b"/x".to_vec());
        assert_eq!(e.varint(4), Some(1000));
        assert_eq!(e.varint(20), Some(5));
        assert_eq!(e.varint(11), None);
        assert_eq!(e.bytes(6), Some(&b"/x"[..]));
        assert_eq!(e.varint(1), Some(0x55c3_8a14_f000));
        assert!(Message::parse(&[0x08, 0x80]).is_err(), "a varint cut short is refused");
        assert!(Message::parse(&[0x0a, 0x05, 1]).is_err(), "bytes longer than the message are refused");
    }

    #[test]
    fn images_round_trip_and_refuse_what_is_not_one() {
        let dir = std::env::temp_dir().join(format!("drums-criu-image-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.img");
        let img = Image { magic: [COMMON_MAGIC, 0x5608_4025], entries: vec![vec![8, 1], vec![], vec![10, 2, 3, 4]] };
        replace_file(&p, &img.to_bytes()).unwrap();
        assert_eq!(Image::read(&p).unwrap(), img);
        std::fs::write(&p, [1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        assert!(Image::read(&p).is_err());
        let mut cut = img.to_bytes();
        cut.pop();
        std::fs::write(&p, cut).unwrap();
        assert!(Image::read(&p).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
