//! Batched datagram sending (sendmmsg): one system call per batch lets a single thread flood at
//! line rate, as interference generators need.

use std::io::IoSlice;
use std::net::UdpSocket;

use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags};

use crate::error::{Result, SysError};

/// Sends `count` copies of `payload` on a connected UDP socket in one sendmmsg(2) call; returns how
/// many the kernel took (fewer when its buffers are full).
pub fn send_copies(socket: &UdpSocket, payload: &[u8], count: usize) -> Result<usize> {
    if count == 0 {
        return Ok(0);
    }
    let iov = [IoSlice::new(payload)];
    let mut controls: Vec<SendAncillaryBuffer<'_, '_, '_>> = (0..count).map(|_| SendAncillaryBuffer::default()).collect();
    let mut msgs: Vec<MMsgHdr<'_>> = controls.iter_mut().map(|c| MMsgHdr::new(&iov, c)).collect();
    rustix::net::sendmmsg(socket, &mut msgs, SendFlags::empty()).map_err(|e| SysError::call("sendmmsg")(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_a_batch_over_loopback() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        assert_eq!(send_copies(&tx, b"abc", 0).unwrap(), 0);
        assert_eq!(send_copies(&tx, b"abc", 8).unwrap(), 8);
        let mut buf = [0u8; 16];
        for _ in 0..8 {
            assert_eq!(rx.recv(&mut buf).unwrap(), 3);
        }
        let unconnected = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(send_copies(&unconnected, b"abc", 1).is_err());
    }
}
