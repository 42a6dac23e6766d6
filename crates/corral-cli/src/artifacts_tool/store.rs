//! Pipeline artifacts in an object store (S3 or anything that speaks its API), for the
//! Kubernetes operator's `--artifact-store`: what the pods around a step run instead of
//! mounting the namespace's claim. A step's pod has its own empty volume at the artifacts'
//! mount; before it starts, its inputs are fetched into it and its outputs made empty
//! ([`ArtifactStore::prepare`]); when its containers have ended, its outputs are uploaded
//! ([`ArtifactStore::upload`], in a sidecar that waits for the kubelet's SIGTERM); the
//! operator's artifact pods hash and read them in the store ([`ArtifactStore::report`]).
//!
//! An artifact at pod path `/corral/artifacts/<run>/<step>/<output>` is the object (or
//! the objects under the prefix) `<store root>/<run>/<step>/<output>`; the operator gives
//! each namespace its own root (`<url>/<namespace>`), so a namespace's credentials can be
//! limited to it. An upload is finished when its marker `.corral/uploaded/<run>/<step>/
//! <output>` exists: a hash never reads an output whose upload did not finish.
//!
//! Directories are kept as their files: an empty directory and a link are not uploaded
//! (a link is said so on stderr). Hashes are the embedded cluster's
//! (`corral_local::artifacts::hash`) for every tree the store can hold.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use object_store::path::{Path as Key, PathPart};
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use corral_api::artifacts_report::ArtifactsReport;
use corral_kube::pipelines::ARTIFACTS_MOUNT;
use corral_local::artifacts::{MAX_CONDITION_TEXT, dir_line, file_line};

/// Where an upload's marker lives, under the namespace's root.
const UPLOADED: &str = ".corral/uploaded";
/// How deep an output is below the mount: `<run>/<step>/<output>`.
const OUTPUT_DEPTH: usize = 3;

/// A namespace's artifacts in an object store, and where the pod's artifact volume is.
pub struct ArtifactStore {
    store: Arc<dyn ObjectStore>,
    root: Key,
    /// Where the pod's artifact volume is on this machine ([`ARTIFACTS_MOUNT`] in a pod).
    volume: PathBuf,
}

impl ArtifactStore {
    /// `s3://bucket/prefix` (credentials, region and endpoint from the `AWS_*` variables
    /// as the AWS tools read them: the namespace's Secret in a pod) or `file:///dir`.
    pub fn open(url: &str, volume: &Path) -> Result<Self, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("--store {url}: {e}"))?;
        let (store, root): (Arc<dyn ObjectStore>, Key) = match parsed.scheme() {
            "s3" => {
                let bucket = parsed.host_str().unwrap_or_default();
                let s3 = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|e| format!("--store {url}: {e}"))?;
                let root = Key::parse(parsed.path().trim_matches('/'))
                    .map_err(|e| format!("--store {url}: {e}"))?;
                (Arc::new(s3), root)
            }
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| format!("--store {url}: not a local path"))?;
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| format!("--store {url}: {e}"))?;
                (Arc::new(fs), Key::default())
            }
            other => {
                return Err(format!(
                    "--store {url}: `{other}` is not a store this build reads; \
                     valid: s3://BUCKET/PREFIX, file:///DIR"
                ));
            }
        };
        Ok(Self {
            store,
            root,
            volume: volume.to_path_buf(),
        })
    }

    /// The artifact's path below the mount (`run/step/output`), refused when the pod path
    /// is not under [`ARTIFACTS_MOUNT`] or climbs out of it.
    fn relative(pod_path: &Path) -> Result<Vec<String>, String> {
        let rel = pod_path.strip_prefix(ARTIFACTS_MOUNT).map_err(|_| {
            format!(
                "{}: not under the artifacts' mount {ARTIFACTS_MOUNT}",
                pod_path.display()
            )
        })?;
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(p) => parts.push(name_of(p)?),
                _ => return Err(format!("{}: not a plain path", pod_path.display())),
            }
        }
        if parts.is_empty() {
            return Err(format!("{}: names no artifact", pod_path.display()));
        }
        Ok(parts)
    }

    fn key(&self, base: &Key, parts: &[String]) -> Key {
        parts
            .iter()
            .fold(base.clone(), |k, p| k.join(PathPart::from(p.as_str())))
    }

    /// The marker of the output a path is in: an output is `<run>/<step>/<output>`, and a
    /// path below one (a served model's file) is read from that output's upload.
    fn marker(&self, parts: &[String]) -> Key {
        let parts = &parts[..parts.len().min(OUTPUT_DEPTH)];
        let base = UPLOADED
            .split('/')
            .fold(self.root.clone(), |k, p| k.join(p));
        self.key(&base, parts)
    }

    fn local(&self, parts: &[String]) -> PathBuf {
        parts.iter().fold(self.volume.clone(), |p, s| p.join(s))
    }

    /// Before a step starts: each output starts empty (its objects and marker deleted, as
    /// the embedded cluster empties an output directory) and is made writable by any user,
    /// and each input is fetched into the volume.
    pub async fn prepare(&self, inputs: &[PathBuf], outputs: &[PathBuf]) -> Result<(), String> {
        for out in outputs {
            let parts = Self::relative(out)?;
            self.delete_under(&self.key(&self.root, &parts)).await?;
            self.delete_exact(&self.marker(&parts)).await?;
            let dir = self.local(&parts);
            corral_local::artifacts::prepare_for_pod(std::slice::from_ref(&dir))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        for input in inputs {
            let parts = Self::relative(input)?;
            self.require_uploaded(input, &parts).await?;
            self.download(&parts).await?;
        }
        Ok(())
    }

    /// After the step's containers ended: each output's files are uploaded, then its
    /// marker. What another replica of the step uploaded to the same output stays (the
    /// union, as replicas writing one directory of a claim leave it).
    pub async fn upload(&self, outputs: &[PathBuf]) -> Result<usize, String> {
        let mut files = 0;
        for out in outputs {
            let parts = Self::relative(out)?;
            let local = self.local(&parts);
            let key = self.key(&self.root, &parts);
            files += self.upload_tree(&local, &key).await?;
            let at = self.marker(&parts);
            self.store
                .put(&at, object_store::PutPayload::from_static(b"uploaded\n"))
                .await
                .map_err(|e| format!("{at}: {e}"))?;
        }
        Ok(files)
    }

    async fn upload_tree(&self, local: &Path, key: &Key) -> Result<usize, String> {
        let meta = match std::fs::symlink_metadata(local) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(format!("{}: {e}", local.display())),
        };
        if meta.is_symlink() {
            eprintln!(
                "corral artifacts: {} is a link: not uploaded",
                local.display()
            );
            return Ok(0);
        }
        if meta.is_file() {
            self.upload_file(local, key).await?;
            return Ok(1);
        }
        if !meta.is_dir() {
            return Ok(0);
        }
        let mut names: Vec<String> = std::fs::read_dir(local)
            .map_err(|e| format!("{}: {e}", local.display()))?
            .map(|e| {
                let e = e.map_err(|e| format!("{}: {e}", local.display()))?;
                name_of(&e.file_name())
            })
            .collect::<Result<_, _>>()?;
        names.sort();
        let mut files = 0;
        for n in names {
            files +=
                Box::pin(self.upload_tree(&local.join(&n), &key.clone().join(n.as_str()))).await?;
        }
        Ok(files)
    }

    async fn upload_file(&self, local: &Path, key: &Key) -> Result<(), String> {
        let mut file = tokio::fs::File::open(local)
            .await
            .map_err(|e| format!("{}: {e}", local.display()))?;
        // Multipart above its buffer: a model's weights are not held in memory.
        let mut writer = object_store::buffered::BufWriter::new(self.store.clone(), key.clone());
        tokio::io::copy(&mut file, &mut writer)
            .await
            .map_err(|e| format!("uploading {} to {key}: {e}", local.display()))?;
        writer
            .shutdown()
            .await
            .map_err(|e| format!("uploading {} to {key}: {e}", local.display()))
    }

    async fn require_uploaded(&self, pod_path: &Path, parts: &[String]) -> Result<(), String> {
        match self.store.head(&self.marker(parts)).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Err(format!(
                "{}: its upload to the artifact store never finished (the log of the \
                 producing step's container `corral-upload` says why)",
                pod_path.display()
            )),
            Err(e) => Err(format!("{}: {e}", pod_path.display())),
        }
    }

    /// The objects of an artifact, by their path below its key (empty: the artifact is
    /// one object at the key).
    async fn objects(&self, key: &Key) -> Result<Vec<(Vec<String>, Key)>, String> {
        let mut found = Vec::new();
        if self.store.head(key).await.is_ok() {
            found.push((Vec::new(), key.clone()));
            return Ok(found);
        }
        let mut list = self.store.list(Some(key));
        while let Some(meta) = list.next().await {
            let meta = meta.map_err(|e| format!("listing {key}: {e}"))?;
            let below: Vec<String> = meta
                .location
                .prefix_match(key)
                .map(|parts| parts.map(|p| p.as_ref().to_string()).collect())
                .unwrap_or_default();
            if !below.is_empty() {
                found.push((below, meta.location));
            }
        }
        found.sort();
        Ok(found)
    }

    async fn download(&self, parts: &[String]) -> Result<(), String> {
        let key = self.key(&self.root, parts);
        let local = self.local(parts);
        for (below, object) in self.objects(&key).await? {
            let to = below.iter().fold(local.clone(), |p, s| p.join(s));
            if let Some(dir) = to.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            let mut stream = self.stream(&object).await?;
            let mut file = tokio::fs::File::create(&to)
                .await
                .map_err(|e| format!("{}: {e}", to.display()))?;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| format!("{object}: {e}"))?;
                file.write_all(&chunk)
                    .await
                    .map_err(|e| format!("{}: {e}", to.display()))?;
            }
            file.flush()
                .await
                .map_err(|e| format!("{}: {e}", to.display()))?;
        }
        if !local.exists() {
            // An output left empty: an empty directory, as its step left it.
            std::fs::create_dir_all(&local).map_err(|e| format!("{}: {e}", local.display()))?;
        }
        Ok(())
    }

    /// An object's bytes as they arrive (a model's weights are not held in memory).
    async fn stream(
        &self,
        object: &Key,
    ) -> Result<futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>, String>
    {
        Ok(self
            .store
            .get(object)
            .await
            .map_err(|e| format!("{object}: {e}"))?
            .into_stream())
    }

    async fn delete_exact(&self, key: &Key) -> Result<(), String> {
        match self.store.delete(key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(format!("deleting {key}: {e}")),
        }
    }

    async fn delete_under(&self, key: &Key) -> Result<(), String> {
        // An object at the key itself (a file artifact); a directory store has a directory
        // there otherwise, which is not an object to delete.
        if self.store.head(key).await.is_ok() {
            self.delete_exact(key).await?;
        }
        let listed: Vec<_> = self.store.list(Some(key)).collect().await;
        for meta in listed {
            let meta = meta.map_err(|e| format!("listing {key}: {e}"))?;
            self.delete_exact(&meta.location).await?;
        }
        Ok(())
    }

    /// `sha256:<hex>` of an uploaded artifact, as `corral_local::artifacts::hash` hashes
    /// the same tree on a disk.
    pub async fn hash(&self, pod_path: &Path) -> Result<String, String> {
        let parts = Self::relative(pod_path)?;
        self.require_uploaded(pod_path, &parts).await?;
        let key = self.key(&self.root, &parts);
        let mut tree = Tree::Dir(BTreeMap::new());
        for (below, object) in self.objects(&key).await? {
            let mut h = Sha256::new();
            let mut stream = self.stream(&object).await?;
            while let Some(chunk) = stream.next().await {
                h.update(chunk.map_err(|e| format!("{object}: {e}"))?);
            }
            tree.insert(&below, format!("{:x}", h.finalize()));
        }
        let mut h = Sha256::new();
        tree.hash("", &mut h);
        Ok(format!("sha256:{:x}", h.finalize()))
    }

    /// The text a condition compares: the trimmed text of the artifact's one file (the
    /// artifact itself or the only entry of its directory), empty otherwise.
    pub async fn text(&self, pod_path: &Path) -> Result<String, String> {
        let parts = Self::relative(pod_path)?;
        self.require_uploaded(pod_path, &parts).await?;
        let key = self.key(&self.root, &parts);
        let objects = self.objects(&key).await?;
        let object = match objects.as_slice() {
            [(below, object)] if below.len() <= 1 => object.clone(),
            _ => return Ok(String::new()),
        };
        let size = self
            .store
            .head(&object)
            .await
            .map_err(|e| format!("{object}: {e}"))?
            .size;
        let bytes = self
            .store
            .get_range(&object, 0..size.min(MAX_CONDITION_TEXT))
            .await
            .map_err(|e| format!("{object}: {e}"))?;
        let cut = &bytes[..bytes.len().min(MAX_CONDITION_TEXT as usize)];
        Ok(String::from_utf8_lossy(cut).trim().to_string())
    }

    /// `corral artifacts hash|read --store`: the report the operator reads.
    pub async fn report(&self, hash: bool, paths: &[PathBuf]) -> Result<ArtifactsReport, String> {
        if hash {
            let mut sha256 = Vec::new();
            for p in paths {
                sha256.push(self.hash(p).await?);
            }
            return Ok(ArtifactsReport {
                sha256,
                text: Vec::new(),
            });
        }
        let mut texts = Vec::new();
        for p in paths {
            texts.push((p.display().to_string(), self.text(p).await?));
        }
        corral_local::artifacts::report_of_texts(texts)
    }
}

/// A file or directory name as a key part: refused when the store would have to encode it
/// (it would come back under another name).
fn name_of(name: &std::ffi::OsStr) -> Result<String, String> {
    let s = name
        .to_str()
        .ok_or_else(|| format!("{}: a name that is not UTF-8", name.to_string_lossy()))?;
    if PathPart::from(s).as_ref() != s {
        return Err(format!(
            "{s}: a name an object store cannot keep as it is (no `%`, control characters, \
             `.` or `..`)"
        ));
    }
    Ok(s.to_string())
}

/// An uploaded artifact's tree: each file's content hash.
enum Tree {
    File(String),
    Dir(BTreeMap<String, Tree>),
}

impl Tree {
    fn insert(&mut self, below: &[String], sha: String) {
        match (below, self) {
            ([], me) => *me = Tree::File(sha),
            ([first, rest @ ..], Tree::Dir(entries)) => entries
                .entry(first.clone())
                .or_insert_with(|| Tree::Dir(BTreeMap::new()))
                .insert(rest, sha),
            // A file and a directory of one name cannot both be on a disk: the file stays.
            (_, Tree::File(_)) => {}
        }
    }

    /// As `corral_local::artifacts::hash_entry` walks a directory: the directory's line,
    /// then its entries in name order (bytes, as a sorted `read_dir`).
    fn hash(&self, rel: &str, h: &mut Sha256) {
        match self {
            Tree::File(sha) => h.update(file_line(rel, sha)),
            Tree::Dir(entries) => {
                h.update(dir_line(rel));
                for (name, entry) in entries {
                    let child = if rel.is_empty() {
                        name.clone()
                    } else {
                        format!("{rel}/{name}")
                    };
                    entry.hash(&child, h);
                }
            }
        }
    }
}
