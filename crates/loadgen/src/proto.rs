//! Wire format, identical on UDP and TCP: a 40-byte little-endian header padded to the message size.
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `RTLG` |
//! | 4 | 2 | kind (0 request, 1 reply, 2 stop) |
//! | 6 | 2 | reserved |
//! | 8 | 4 | total message length (header + padding) |
//! | 12 | 4 | length the reply must have |
//! | 16 | 8 | request id |
//! | 24 | 8 | compute amount in ns |
//! | 32 | 8 | client send time in ns (echoed back, so the client needs no shared state) |
//! | 40 | 8 | reply: the server thread's total CPU time so far (ns) |
//! | 48 | 8 | reply: of which spent in requested work (ns) |
//!
//! The last two let the client measure the server's per-request overhead (receive, reply, loop),
//! CPU the model does not know about unless told.

use crate::{LoadgenError, Result};

pub const MAGIC: [u8; 4] = *b"RTLG";
pub const HEADER: usize = 56;
/// Largest message (a UDP datagram must fit in one).
pub const MAX_MESSAGE: usize = 65_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request = 0,
    Reply = 1,
    Stop = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    pub kind: Kind,
    pub len: u32,
    pub reply_len: u32,
    pub id: u64,
    pub compute_ns: u64,
    pub send_ns: u64,
    pub server_cpu_ns: u64,
    pub server_work_ns: u64,
}

impl Message {
    /// Writes the message into `buf` (resized to its length, padding zeroed).
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let len = (self.len as usize).max(HEADER);
        buf.clear();
        buf.resize(len, 0);
        buf[0..4].copy_from_slice(&MAGIC);
        buf[4..6].copy_from_slice(&(self.kind as u16).to_le_bytes());
        buf[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        buf[12..16].copy_from_slice(&self.reply_len.to_le_bytes());
        buf[16..24].copy_from_slice(&self.id.to_le_bytes());
        buf[24..32].copy_from_slice(&self.compute_ns.to_le_bytes());
        buf[32..40].copy_from_slice(&self.send_ns.to_le_bytes());
        buf[40..48].copy_from_slice(&self.server_cpu_ns.to_le_bytes());
        buf[48..56].copy_from_slice(&self.server_work_ns.to_le_bytes());
    }

    /// Reads a header (the first [`HEADER`] bytes of a message).
    pub fn decode(buf: &[u8]) -> Result<Message> {
        if buf.len() < HEADER {
            return Err(LoadgenError::Protocol(format!("message of {} bytes is shorter than the {HEADER}-byte header", buf.len())));
        }
        if buf[0..4] != MAGIC {
            return Err(LoadgenError::Protocol("bad magic: the peer is not an rtslice loadgen".into()));
        }
        let u16_at = |o: usize| u16::from_le_bytes(buf[o..o + 2].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(buf[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(buf[o..o + 8].try_into().unwrap());
        let kind = match u16_at(4) {
            0 => Kind::Request,
            1 => Kind::Reply,
            2 => Kind::Stop,
            k => return Err(LoadgenError::Protocol(format!("unknown message kind {k}"))),
        };
        let len = u32_at(8);
        if (len as usize) < HEADER || len as usize > MAX_MESSAGE {
            return Err(LoadgenError::Protocol(format!("message length {len} outside {HEADER}..={MAX_MESSAGE}")));
        }
        Ok(Message {
            kind,
            len,
            reply_len: u32_at(12),
            id: u64_at(16),
            compute_ns: u64_at(24),
            send_ns: u64_at(32),
            server_cpu_ns: u64_at(40),
            server_work_ns: u64_at(48),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let m = Message {
            kind: Kind::Request,
            len: 128,
            reply_len: 64,
            id: 7,
            compute_ns: 123_456,
            send_ns: 99,
            server_cpu_ns: 5,
            server_work_ns: 4,
        };
        let mut buf = Vec::new();
        m.encode(&mut buf);
        assert_eq!(buf.len(), 128);
        assert_eq!(Message::decode(&buf).unwrap(), m);
        let small = Message { len: 3, ..m };
        small.encode(&mut buf);
        assert_eq!(buf.len(), HEADER);
        assert!(Message::decode(&buf[..10]).is_err());
        buf[0] = b'X';
        assert!(Message::decode(&buf).is_err());
    }
}
