//! Where artifacts live embedded: a pipeline step's in
//! `<data>/artifacts/<namespace>/<run>/<step>/<output>`, one directory per output; every
//! TrainingJob's output (`$CORRAL_OUTPUT_DIR`) in
//! `<data>/artifacts/<namespace>/.jobs/<job>.<uid prefix>` (a run is never named `.jobs`).
//! A job's output goes with its job unless a served model serves from it (see the cluster's
//! `discard_job_output`); a run's artifacts stay after the run for the cache, until nothing
//! holds them and the retention has passed (the cluster's `artifact_gc`). How their content
//! is hashed
//! (SHA-256) and read.
//!
//! The wall between tenants (see [`crate::tenancy`]): when replicas run under their
//! namespace's uid, `artifacts/` is `0711` (passable, not listable), a namespace's tree
//! is `root:<its gid>` `0750` and an output directory is its uid's, `0750`: steps of the
//! same namespace read each other's artifacts, nobody else does. The server never follows
//! a link a step left: a link is hashed as its target's name, and a condition reads only a
//! regular file.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use corral_api::artifacts_report::{ArtifactsReport, REPORT_TEXT_LIMIT};
use corral_core::tenancy::TenantIdentity;
use sha2::{Digest, Sha256};

use crate::tenancy::set_owner_mode;

/// The largest artifact text a condition compares, or a fan-out reads its items from.
pub const MAX_CONDITION_TEXT: u64 = 64 * 1024;

pub fn root(data_dir: &Path) -> PathBuf {
    data_dir.join("artifacts")
}

pub fn output_dir(
    data_dir: &Path,
    namespace: &str,
    run: &str,
    step: &str,
    output: &str,
) -> PathBuf {
    root(data_dir)
        .join(namespace)
        .join(run)
        .join(step)
        .join(output)
}

/// The output directory of TrainingJob `job` (uid `uid`) of `namespace`: a job re-created
/// under the same name gets another.
pub fn job_output_dir(data_dir: &Path, namespace: &str, job: &str, uid: &str) -> PathBuf {
    let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
    root(data_dir)
        .join(namespace)
        .join(JOBS_DIR)
        .join(format!("{job}.{short}"))
}

const JOBS_DIR: &str = ".jobs";

/// Makes a job's output directory, once (a restarted replica finds what the last one
/// wrote), with the modes of the module docs.
pub fn prepare_job_output(
    data_dir: &Path,
    namespace: &str,
    dir: &Path,
    who: Option<TenantIdentity>,
) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let top = root(data_dir);
    let jobs = top.join(namespace).join(JOBS_DIR);
    fs::create_dir_all(&jobs)?;
    match who {
        Some(id) => {
            set_owner_mode(&top, 0, 0, 0o711)?;
            for d in [top.join(namespace), jobs] {
                set_owner_mode(&d, 0, id.gid, 0o750)?;
            }
            fs::create_dir(dir)?;
            set_owner_mode(dir, id.uid, id.gid, 0o750)
        }
        None => {
            fs::set_permissions(&top, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
            fs::create_dir(dir)
        }
    }
}

/// Makes a step's output directories, empty, with the modes of the module docs.
pub fn prepare_outputs(
    data_dir: &Path,
    namespace: &str,
    run: &str,
    step: &str,
    outputs: &[String],
    who: Option<TenantIdentity>,
) -> io::Result<Vec<(String, PathBuf)>> {
    let top = root(data_dir);
    let step_dir = top.join(namespace).join(run).join(step);
    fs::create_dir_all(&step_dir)?;
    match who {
        Some(id) => {
            set_owner_mode(&top, 0, 0, 0o711)?;
            for d in [
                top.join(namespace),
                top.join(namespace).join(run),
                step_dir.clone(),
            ] {
                set_owner_mode(&d, 0, id.gid, 0o750)?;
            }
        }
        None => fs::set_permissions(&top, std::os::unix::fs::PermissionsExt::from_mode(0o700))?,
    }
    let mut out = Vec::new();
    for name in outputs {
        let dir = step_dir.join(name);
        // What an earlier attempt left (a crash before its job was stored) is not this
        // step's output.
        if fs::symlink_metadata(&dir).is_ok() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir(&dir)?;
        if let Some(id) = who {
            set_owner_mode(&dir, id.uid, id.gid, 0o750)?;
        }
        out.push((name.clone(), dir));
    }
    Ok(out)
}

/// `sha256:<hex>` of an artifact: a file's bytes, or a directory's entries in name order
/// (relative path, kind and content hash each), so that equal trees hash equal wherever
/// they are. A missing artifact hashes as an empty directory.
pub fn hash(path: &Path) -> io::Result<String> {
    let mut h = Sha256::new();
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
        Ok(_) => hash_entry(path, Path::new(""), &mut h)?,
    }
    Ok(format!("sha256:{:x}", h.finalize()))
}

fn hash_entry(path: &Path, rel: &Path, h: &mut Sha256) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    let name = rel.to_string_lossy();
    if meta.is_dir() {
        h.update(dir_line(&name));
        let mut entries: Vec<_> = fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for e in entries {
            hash_entry(&path.join(&e), &rel.join(&e), h)?;
        }
    } else if meta.is_symlink() {
        let target = fs::read_link(path)?;
        h.update(format!("l {name}\0{}\0", target.to_string_lossy()));
    } else if meta.is_file() {
        let mut f = open_no_follow(path)?;
        let mut fh = Sha256::new();
        io::copy(&mut f, &mut fh)?;
        h.update(file_line(&name, &format!("{:x}", fh.finalize())));
    }
    Ok(())
}

/// What a directory adds to an artifact's hash: its path below the artifact.
pub fn dir_line(rel: &str) -> String {
    format!("d {rel}\0")
}

/// What a file adds to an artifact's hash: its path below the artifact and its content's
/// SHA-256 (hex). Shared with a store's hash (`corral artifacts hash --store`), which must
/// equal this one.
pub fn file_line(rel: &str, sha256_hex: &str) -> String {
    format!("f {rel}\0{sha256_hex}\0")
}

/// Opens a file a step left, refusing a link put in its place after it was looked at.
fn open_no_follow(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// What a condition compares an artifact with: the trimmed text of its one regular file
/// (the artifact itself, or the only entry of its directory), at most
/// [`MAX_CONDITION_TEXT`] bytes; empty otherwise.
pub fn condition_text(path: &Path) -> String {
    let file = match fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => path.to_path_buf(),
        Ok(m) if m.is_dir() => {
            let entries: Vec<PathBuf> = fs::read_dir(path)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect();
            match entries.as_slice() {
                [one] if fs::symlink_metadata(one).is_ok_and(|m| m.is_file()) => one.clone(),
                _ => return String::new(),
            }
        }
        _ => return String::new(),
    };
    let mut text = String::new();
    let _ =
        open_no_follow(&file).and_then(|f| f.take(MAX_CONDITION_TEXT).read_to_string(&mut text));
    text.trim().to_string()
}

/// `corral artifacts hash PATH...`: each path's hash, for a shell that cannot read the
/// volume the artifacts are on (the operator; see `corral_api::artifacts_report`).
pub fn report_hashes(paths: &[PathBuf]) -> io::Result<ArtifactsReport> {
    let sha256 = paths
        .iter()
        .map(|p| hash(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display()))))
        .collect::<io::Result<_>>()?;
    Ok(ArtifactsReport {
        sha256,
        text: Vec::new(),
    })
}

/// `corral artifacts read PATH...`: each path's text as a condition reads it; a text longer
/// than a report carries is refused (cut, a condition would compare the wrong words).
pub fn report_texts(paths: &[PathBuf]) -> Result<ArtifactsReport, String> {
    report_of_texts(
        paths
            .iter()
            .map(|p| (p.display().to_string(), condition_text(p)))
            .collect(),
    )
}

/// The report of artifacts' texts (each named for the error), refused when one is longer
/// than a report carries, wherever the texts were read (a volume or an object store).
pub fn report_of_texts(texts: Vec<(String, String)>) -> Result<ArtifactsReport, String> {
    let mut text = Vec::new();
    for (name, t) in texts {
        if t.len() > REPORT_TEXT_LIMIT {
            return Err(format!(
                "{name}: {} bytes; on Kubernetes a condition or a fan-out reads at most \
                 {REPORT_TEXT_LIMIT} bytes of an artifact",
                t.len()
            ));
        }
        text.push(t);
    }
    Ok(ArtifactsReport {
        sha256: Vec::new(),
        text,
    })
}

/// `corral artifacts prepare DIR...`: a step's output directories, made before it starts
/// (as embedded) and writable whatever user its image runs as: the volume is its
/// namespace's alone, which is the wall between tenants there.
pub fn prepare_for_pod(dirs: &[PathBuf]) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for d in dirs {
        fs::create_dir_all(d)?;
        fs::set_permissions(d, fs::Permissions::from_mode(0o777))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_trees_hash_equal_wherever_they_are_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        for side in ["a", "b"] {
            let root = dir.path().join(side);
            fs::create_dir_all(root.join("sub")).unwrap();
            fs::write(root.join("sub/x.txt"), "x").unwrap();
            fs::write(root.join("y.txt"), "y").unwrap();
        }
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        assert_eq!(hash(&a).unwrap(), hash(&b).unwrap());
        fs::write(b.join("y.txt"), "changed").unwrap();
        assert_ne!(hash(&a).unwrap(), hash(&b).unwrap());
        // A link is its target's name: what it points to is never read.
        let secret = dir.path().join("secret");
        fs::write(&secret, "one").unwrap();
        std::os::unix::fs::symlink(&secret, a.join("link")).unwrap();
        let before = hash(&a).unwrap();
        fs::write(&secret, "two").unwrap();
        assert_eq!(before, hash(&a).unwrap());
        assert_eq!(condition_text(&a.join("link")), "");
    }

    #[test]
    fn a_condition_reads_the_one_file_of_an_artifact() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("verdict"), " pass\n").unwrap();
        assert_eq!(condition_text(dir.path()), "pass");
        fs::write(dir.path().join("other"), "x").unwrap();
        assert_eq!(condition_text(dir.path()), "", "two files: no text");
    }

    #[test]
    fn the_operators_artifact_pods_report_what_the_embedded_cluster_reads() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run/step/model");
        prepare_for_pod(std::slice::from_ref(&out)).unwrap();
        let mode = fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o777, "writable whatever user the step runs as");
        fs::write(out.join("score"), "0.93\n").unwrap();
        let missing = dir.path().join("nothing");
        let hashes = report_hashes(&[out.clone(), missing.clone()]).unwrap();
        assert_eq!(
            hashes.sha256,
            vec![hash(&out).unwrap(), hash(&missing).unwrap()]
        );
        let texts = report_texts(std::slice::from_ref(&out)).unwrap();
        assert_eq!(texts.text, vec!["0.93".to_string()]);
        assert!(hashes.to_message().unwrap().len() < 200);
        // Longer than a termination message carries: refused, never cut.
        fs::write(out.join("score"), "x".repeat(REPORT_TEXT_LIMIT + 1)).unwrap();
        let e = report_texts(std::slice::from_ref(&out)).unwrap_err();
        assert!(e.contains("at most 3072 bytes"), "{e}");
    }
}
