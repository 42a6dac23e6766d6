//! `corral submit --code DIR`: the directory as the server takes it (see
//! `corral_local::code`). The walk honours `.gitignore` and `.ignore` files inside the
//! directory, as ripgrep does (the `ignore` crate), but not the user's global excludes, so
//! that what ships depends on the directory alone; `.git` is left out. Entries are sorted
//! and their times and owners zeroed, so the same files make the same archive (and
//! digest). Symbolic links are left out (said on stderr): a snapshot holds regular files and
//! directories.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

/// What was packed.
#[derive(Debug, Default)]
pub struct Packed {
    pub files: u64,
    /// The files' bytes.
    pub bytes: u64,
    /// Paths left out (symbolic links, special files), relative to the directory.
    pub left_out: Vec<String>,
}

/// Writes `dir` as a tar.gz archive into `out`.
pub fn write_archive(dir: &Path, out: impl Write) -> Result<Packed, String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("--code {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("--code {}: not a directory", dir.display()));
    }
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mut packed = Packed::default();
    let walk = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    for entry in walk {
        let entry = entry.map_err(|e| format!("--code {}: {e}", dir.display()))?;
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(dir) else {
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let shown = rel.display().to_string();
        let Some(kind) = entry.file_type() else {
            continue;
        };
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        if kind.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            tar.append_data(&mut header, rel, io::empty())
                .map_err(|e| format!("archiving {shown}: {e}"))?;
        } else if kind.is_file() {
            let file = File::open(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            let m = file
                .metadata()
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            use std::os::unix::fs::PermissionsExt;
            let exec = m.permissions().mode() & 0o111 != 0;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(if exec { 0o755 } else { 0o644 });
            header.set_size(m.len());
            // At most the size in the header, should the file grow while it is read.
            tar.append_data(&mut header, rel, file.take(m.len()))
                .map_err(|e| format!("archiving {shown}: {e}"))?;
            packed.files += 1;
            packed.bytes += m.len();
        } else {
            packed.left_out.push(shown);
        }
    }
    tar.into_inner()
        .and_then(|gz| gz.finish())
        .map_err(|e| format!("writing the archive: {e}"))?;
    Ok(packed)
}

/// Counts and hashes what passes through.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A submission with code as the `submissions` route takes it: a multipart/form-data body
/// in a temporary file (its length known, so the server can refuse it before the upload).
pub struct Upload {
    pub body: File,
    pub boundary: String,
    pub digest: String,
    pub packed: Packed,
}

/// Makes the body of a submission of `manifest` with the snapshot of `dir`.
pub fn upload(manifest: &str, dir: &Path) -> Result<Upload, String> {
    let boundary = format!("corral-{:016x}", {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        h.finish()
    });
    let io = |e: io::Error| format!("writing the upload: {e}");
    let mut body = tempfile::tempfile().map_err(io)?;
    write!(
        body,
        "--{boundary}\r\nContent-Disposition: form-data; name=\"manifest\"\r\n\
         Content-Type: application/yaml\r\n\r\n{manifest}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"code\"; filename=\"code.tar.gz\"\r\n\
         Content-Type: application/gzip\r\n\r\n"
    )
    .map_err(io)?;
    // A second handle of the same file (one offset): the archive follows the header.
    let mut hashing = Hashing {
        inner: io::BufWriter::new(body.try_clone().map_err(io)?),
        hash: Sha256::new(),
    };
    let packed = write_archive(dir, &mut hashing)?;
    hashing.flush().map_err(io)?;
    let hash = hashing.hash;
    let digest = corral_local::code::format_digest(hash);
    write!(
        body,
        "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"digest\"\r\n\r\n{digest}\r\n\
         --{boundary}--\r\n"
    )
    .map_err(io)?;
    body.flush().map_err(io)?;
    body.rewind().map_err(io)?;
    Ok(Upload {
        body,
        boundary,
        digest,
        packed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(archive: &[u8]) -> Vec<String> {
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(archive));
        a.entries()
            .expect("entries")
            .map(|e| {
                e.expect("entry")
                    .path()
                    .expect("path")
                    .display()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn honours_gitignore_and_is_deterministic() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        std::fs::write(d.join(".gitignore"), "secret.txt\nbuild/\n").expect("write");
        std::fs::write(d.join("train.py"), "print('hi')\n").expect("write");
        std::fs::write(d.join("secret.txt"), "x").expect("write");
        std::fs::create_dir_all(d.join("build")).expect("mkdir");
        std::fs::write(d.join("build/out.bin"), "x").expect("write");
        std::fs::create_dir_all(d.join(".git")).expect("mkdir");
        std::fs::write(d.join(".git/HEAD"), "ref").expect("write");
        std::os::unix::fs::symlink("train.py", d.join("link.py")).expect("symlink");
        let mut a = Vec::new();
        let p = write_archive(d, &mut a).expect("archive");
        assert_eq!(names(&a), vec![".gitignore", "train.py"]);
        assert_eq!(p.left_out, vec!["link.py"]);
        assert_eq!(p.files, 2);
        let mut b = Vec::new();
        write_archive(d, &mut b).expect("archive");
        assert_eq!(a, b, "the same files make the same archive");
        let e = write_archive(&d.join("train.py"), Vec::new()).expect_err("a file");
        assert!(e.contains("not a directory"), "{e}");
    }
}
