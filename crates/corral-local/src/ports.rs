//! TCP ports for replicas (MASTER_PORT, TF_CONFIG addresses, rendezvous endpoints), from a
//! configured range. A port is never given to two owners at once, and a port is only handed
//! out when it can be bound right now (nobody else on the machine listens on it).
//!
//! Allocation walks the range from a cursor that moves on, so a port just released is the last
//! one reused (its old connections may still be in TIME_WAIT). After a restart, the ports of
//! re-adopted replicas are restored with [`PortAllocator::reserve`].

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::ops::Range;

/// Not enough free ports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("only {available} of {requested} ports free in {start}..{end}")]
pub struct PortsExhausted {
    pub requested: usize,
    pub available: usize,
    pub start: u16,
    pub end: u16,
}

/// Hands out ports from a range; one owner (a replica or a job) holds each port.
#[derive(Debug, Clone)]
pub struct PortAllocator {
    range: Range<u16>,
    next: u16,
    /// port -> owner
    taken: BTreeMap<u16, String>,
}

impl PortAllocator {
    pub fn new(range: Range<u16>) -> Self {
        PortAllocator {
            next: range.start,
            range,
            taken: BTreeMap::new(),
        }
    }

    pub fn range(&self) -> Range<u16> {
        self.range.clone()
    }

    /// `n` distinct ports for `owner`, each free in this allocator and bindable now. All or
    /// nothing: on error no port is taken.
    pub fn allocate(&mut self, owner: &str, n: usize) -> Result<Vec<u16>, PortsExhausted> {
        let len = self.range.len();
        let mut got = Vec::with_capacity(n);
        let mut cursor = self.next;
        for _ in 0..len {
            if got.len() == n {
                break;
            }
            let port = cursor;
            cursor = if cursor + 1 >= self.range.end {
                self.range.start
            } else {
                cursor + 1
            };
            if !self.taken.contains_key(&port) && bindable(port) {
                got.push(port);
            }
        }
        if got.len() < n {
            return Err(PortsExhausted {
                requested: n,
                available: got.len(),
                start: self.range.start,
                end: self.range.end,
            });
        }
        self.next = cursor;
        for &p in &got {
            self.taken.insert(p, owner.to_string());
        }
        Ok(got)
    }

    /// Records ports already in use by `owner` (re-adopted replicas after a restart). Ports
    /// held by another owner are returned as conflicts and not taken.
    pub fn reserve(&mut self, owner: &str, ports: &[u16]) -> Vec<u16> {
        let mut conflicts = Vec::new();
        for &p in ports {
            match self.taken.get(&p) {
                Some(o) if o != owner => conflicts.push(p),
                _ => {
                    self.taken.insert(p, owner.to_string());
                }
            }
        }
        conflicts
    }

    /// Frees every port of `owner`; returns them.
    pub fn release(&mut self, owner: &str) -> Vec<u16> {
        let ports: Vec<u16> = self
            .taken
            .iter()
            .filter(|(_, o)| o.as_str() == owner)
            .map(|(p, _)| *p)
            .collect();
        for p in &ports {
            self.taken.remove(p);
        }
        ports
    }

    /// The ports `owner` holds.
    pub fn ports_of(&self, owner: &str) -> Vec<u16> {
        self.taken
            .iter()
            .filter(|(_, o)| o.as_str() == owner)
            .map(|(p, _)| *p)
            .collect()
    }

    pub fn in_use(&self) -> usize {
        self.taken.len()
    }
}

/// Whether a TCP listener can bind the port on all interfaces now, as a server that does
/// not set SO_REUSEADDR binds it (XGBoost's tracker, among others): such a bind also fails
/// while connections of the port's last listener linger in TIME_WAIT, which a check with
/// SO_REUSEADDR (what std's `TcpListener` sets) passes, handing out a port the replica then
/// cannot bind for up to a minute.
pub fn bindable(port: u16) -> bool {
    use rustix::net::{AddressFamily, SocketAddrV4, SocketType, bind, socket};
    let Ok(fd) = socket(AddressFamily::INET, SocketType::STREAM, None) else {
        return false;
    };
    bind(&fd, &SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausting_the_range_is_all_or_nothing() {
        let mut ports = PortAllocator::new(41000..41003);
        let err = ports.allocate("a", 4).expect_err("only 3 in range");
        assert_eq!(err.requested, 4);
        assert_eq!(ports.in_use(), 0);
    }

    #[test]
    fn reserve_reports_conflicts() {
        let mut ports = PortAllocator::new(41010..41020);
        let got = ports.allocate("a", 1).expect("free");
        assert_eq!(ports.reserve("b", &got), got);
        assert!(ports.reserve("a", &got).is_empty());
    }

    #[test]
    fn a_port_in_time_wait_or_listened_on_is_not_bindable() {
        use std::io::Read;
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("listen");
        let port = listener.local_addr().expect("addr").port();
        assert!(!bindable(port), "a port listened on");
        let client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("connect");
        let (served, _) = listener.accept().expect("accept");
        // The server's side closes first: its connection on `port` lingers in TIME_WAIT.
        drop(served);
        let mut buf = [0u8; 1];
        let _ = (&client).read(&mut buf);
        drop(client);
        drop(listener);
        assert!(
            TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok(),
            "with SO_REUSEADDR (std) it binds"
        );
        assert!(!bindable(port), "without SO_REUSEADDR it does not, yet");
    }
}
