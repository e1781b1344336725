//! [`DiskStorage`]: the real file system, with positioned I/O
//! (`pread`/`pwrite`), `fdatasync` and directory `fsync`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::{Storage, StorageFile};

/// A directory on the real file system.
#[derive(Debug, Clone)]
pub struct DiskStorage {
    dir: PathBuf,
}

impl DiskStorage {
    /// Use `dir`, creating it if needed.
    pub fn new(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        Ok(DiskStorage { dir })
    }
}

#[derive(Debug)]
struct DiskFile(File);

impl Storage for DiskStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.dir.join(name))?;
        Ok(Arc::new(DiskFile(file)))
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.join(name))?;
        Ok(Arc::new(DiskFile(file)))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn free_bytes(&self) -> io::Result<u64> {
        let st = rustix::fs::statvfs(&self.dir)?;
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }
}

impl StorageFile for DiskFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }

    fn read_vec_at(&self, len: usize, offset: u64) -> io::Result<Vec<u8>> {
        // `with_capacity` gives exactly `len` of room, so no read goes past `len` bytes.
        let mut buf = Vec::with_capacity(len);
        while buf.len() < len {
            let at = offset + buf.len() as u64;
            match rustix::io::pread(&self.0, rustix::buffer::spare_capacity(&mut buf), at) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(len);
        Ok(buf)
    }

    fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn preallocate(&self, len: u64) -> io::Result<()> {
        if self.size()? >= len {
            return Ok(());
        }
        match rustix::fs::fallocate(&self.0, rustix::fs::FallocateFlags::empty(), 0, len) {
            Ok(()) => Ok(()),
            // A file system without fallocate, or too little room to reserve a whole segment
            // ahead: the file simply grows as it is written (a full disk fails the write).
            Err(e)
                if e == rustix::io::Errno::OPNOTSUPP
                    || e == rustix::io::Errno::NOSYS
                    || e == rustix::io::Errno::NOSPC =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
