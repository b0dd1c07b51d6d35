//! Batched datagram sending (sendmmsg): one system call per batch lets a single thread flood at
//! line rate, as interference generators need. Unix datagrams with the sender's kernel-checked
//! process id (SO_PASSCRED), for report channels that attribute a message to a workload.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::UdpSocket;
use std::os::unix::net::UnixDatagram;

use rustix::net::{MMsgHdr, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendFlags};

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

/// Asks the kernel to attach the sender's credentials to every datagram `socket` receives.
pub fn pass_credentials(socket: &UnixDatagram) -> Result<()> {
    rustix::net::sockopt::set_socket_passcred(socket, true).map_err(|e| SysError::call("setsockopt(SO_PASSCRED)")(e.into()))
}

/// Receives one datagram (blocking, or as the socket's timeout says) with the sending process's id
/// as the kernel checked it; `None` when the socket was not set up with [`pass_credentials`].
/// A datagram longer than `buf` is truncated to it.
pub fn recv_with_sender(socket: &UnixDatagram, buf: &mut [u8]) -> Result<(usize, Option<u32>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = rustix::net::recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)
        .map_err(|e| SysError::call("recvmsg")(e.into()))?;
    let mut pid = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmCredentials(cred) = m {
            pid = Some(cred.pid.as_raw_nonzero().get() as u32);
        }
    }
    Ok((msg.bytes, pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_datagrams_carry_the_senders_pid() {
        let dir = std::env::temp_dir().join(format!("rtslice-sys-passcred-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let rx = UnixDatagram::bind(&dir).unwrap();
        pass_credentials(&rx).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        tx.send_to(b"hello", &dir).unwrap();
        let mut buf = [0u8; 3];
        let (n, pid) = recv_with_sender(&rx, &mut buf).unwrap();
        assert_eq!((n, &buf[..]), (3, &b"hel"[..]), "truncated to the buffer");
        assert_eq!(pid, Some(std::process::id()));
        let _ = std::fs::remove_file(&dir);
    }

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
