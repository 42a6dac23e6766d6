//! Small records kept for long, packed one after another into shared blocks.
//!
//! A finished job keeps little: its name in the control plane, its `list` row in a shell.
//! Kept as small allocations of their own, each made at the job's last change amid the
//! short-lived allocations of a busy pass, 20,000 of them held glibc's free chunks apart
//! all over the heap: an 8-replica start then took about 15% longer than on an empty
//! server, most of the difference in `malloc` walking scattered free chunks (perf, issue
//! 18). Packed into large blocks they hold nothing apart. A block is freed when the last
//! record in it is dropped.

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};

/// The size of a block: large enough that a block is one allocation among few (glibc
/// maps allocations of this size on their own), small enough that a nearly empty one
/// costs little.
const BLOCK_BYTES: usize = 256 * 1024;

/// Records larger than this are allocated on their own, so that one large record does
/// not leave most of a block unused.
const LARGEST_PACKED: usize = BLOCK_BYTES / 16;

/// Packs records into the current block and starts a new one when it is full.
#[derive(Default)]
pub struct Packer {
    block: BytesMut,
}

impl Packer {
    /// `parts` one after the other as one record: a slice of the current block, sharing
    /// it with the records packed before.
    pub fn pack(&mut self, parts: &[&[u8]]) -> Bytes {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > LARGEST_PACKED {
            let mut own = BytesMut::with_capacity(len);
            for p in parts {
                own.extend_from_slice(p);
            }
            return own.freeze();
        }
        // After a split the block's capacity is what is left of it.
        if self.block.capacity() < len {
            self.block = BytesMut::with_capacity(BLOCK_BYTES);
        }
        for p in parts {
            self.block.extend_from_slice(p);
        }
        self.block.split().freeze()
    }
}

/// A set of names (job keys) packed into blocks: what the control plane keeps of a
/// retired job.
#[derive(Default)]
pub struct PackedNames {
    names: BTreeSet<Bytes>,
    packer: Packer,
}

impl PackedNames {
    /// Adds a name; returns whether it was new.
    pub fn insert(&mut self, name: &str) -> bool {
        if self.contains(name) {
            return false;
        }
        let packed = self.packer.pack(&[name.as_bytes()]);
        self.names.insert(packed)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name.as_bytes())
    }

    /// Removes a name; returns whether it was there. Its bytes stay in their block until
    /// every name of the block is removed.
    pub fn remove(&mut self, name: &str) -> bool {
        self.names.remove(name.as_bytes())
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_packed_one_after_another_in_one_block() {
        let mut packer = Packer::default();
        let a = packer.pack(&[b"team", b"\0", b"job-a"]);
        let b = packer.pack(&[b"team/job-b"]);
        assert_eq!(&a[..], b"team\0job-a");
        assert_eq!(&b[..], b"team/job-b");
        // The second record starts where the first ends: one allocation for both.
        assert_eq!(b.as_ptr(), a.as_ptr().wrapping_add(a.len()));
    }

    #[test]
    fn a_full_block_is_followed_by_a_new_one_and_every_record_survives() {
        let mut packer = Packer::default();
        let records: Vec<(String, Bytes)> = (0..20_000)
            .map(|i| {
                let text = format!("namespace-{}/job-{i}", i % 7);
                let packed = packer.pack(&[text.as_bytes()]);
                (text, packed)
            })
            .collect();
        // 20,000 records of about 20 bytes fill more than one block.
        let first = records[0].1.as_ptr() as usize;
        assert!(records.iter().any(|(_, b)| {
            let p = b.as_ptr() as usize;
            p < first || p >= first + BLOCK_BYTES
        }));
        for (text, packed) in &records {
            assert_eq!(&packed[..], text.as_bytes());
        }
    }

    #[test]
    fn a_large_record_is_its_own_allocation_and_does_not_end_the_block() {
        let mut packer = Packer::default();
        let a = packer.pack(&[b"small"]);
        let large = vec![b'x'; LARGEST_PACKED + 1];
        let big = packer.pack(&[&large]);
        let b = packer.pack(&[b"next"]);
        assert_eq!(&big[..], &large[..]);
        assert_eq!(b.as_ptr(), a.as_ptr().wrapping_add(a.len()));
    }

    #[test]
    fn names_are_found_added_once_and_removed() {
        let mut names = PackedNames::default();
        assert!(names.insert("team/a"));
        assert!(!names.insert("team/a"));
        assert!(names.insert("team/b"));
        assert!(names.contains("team/a"));
        assert!(!names.contains("team/c"));
        assert_eq!(names.len(), 2);
        assert!(names.remove("team/a"));
        assert!(!names.remove("team/a"));
        assert!(!names.contains("team/a"));
        assert!(names.contains("team/b"));
    }
}
