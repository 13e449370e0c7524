//! A remote object read in small pieces, for readers that touch a few scattered bytes of a
//! large object (`scan`: a ZIP's end records and central directory, each member's local
//! header, the pickles). [`crate::object::RemoteObject`] serves small reads from 4 MiB blocks,
//! which suits converting (neighbouring reads coalesce) but would fetch 4 MiB around every
//! local header; here small reads are served from [`PIECE`]-sized pieces instead, and larger
//! reads ask exactly their bytes.

use std::path::Path;
use std::sync::{Arc, Mutex};

use weightport_core::{ByteSource, Identity, Result};

use crate::object::RemoteObject;

/// Reads shorter than this are served from pieces of this size fetched whole (a local header
/// and its name, a few central-directory reads of a `BufReader`).
const PIECE: u64 = 16 << 10;
/// Pieces kept per object (least recently used dropped first): 4 MiB.
const PIECES_KEPT: usize = 256;

/// A kept piece: its number, when it was last used, its bytes.
type Piece = (u64, u64, Arc<Vec<u8>>);

/// [`RemoteObject`] read in [`PIECE`]-sized pieces (see the module docs).
pub(crate) struct Sparse {
    object: Arc<RemoteObject>,
    kept: Mutex<(u64, Vec<Piece>)>,
}

impl Sparse {
    pub(crate) fn new(object: Arc<RemoteObject>) -> Sparse {
        Sparse {
            object,
            kept: Mutex::new((0, Vec::new())),
        }
    }

    /// Piece `k`, fetched when not kept.
    fn piece(&self, k: u64) -> Result<Arc<Vec<u8>>> {
        {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.0 += 1;
            let now = kept.0;
            if let Some(p) = kept.1.iter_mut().find(|p| p.0 == k) {
                p.1 = now;
                return Ok(p.2.clone());
            }
        }
        let start = k * PIECE;
        let mut data = vec![0u8; (self.object.len() - start).min(PIECE) as usize];
        self.object.read_exact_at(start, &mut data)?;
        let data = Arc::new(data);
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.1.len() >= PIECES_KEPT {
            let oldest = (0..kept.1.len()).min_by_key(|&i| kept.1[i].1).unwrap_or(0);
            kept.1.swap_remove(oldest);
        }
        let now = kept.0;
        kept.1.push((k, now, data.clone()));
        Ok(data)
    }
}

impl ByteSource for Sparse {
    fn name(&self) -> &Path {
        self.object.name()
    }
    fn len(&self) -> u64 {
        self.object.len()
    }
    fn identity(&self) -> &Identity {
        self.object.identity()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() as u64;
        let end = offset
            .checked_add(n)
            .filter(|&e| e <= self.len())
            .ok_or_else(|| weightport_core::bytes::past_end(self.name(), offset, n, self.len()))?;
        if n >= PIECE {
            return self.object.read_exact_at(offset, buf);
        }
        let mut at = offset;
        while at < end {
            let k = at / PIECE;
            let p = self.piece(k)?;
            let from = (at - k * PIECE) as usize;
            let take = ((end - at) as usize).min(p.len() - from);
            let done = (at - offset) as usize;
            buf[done..done + take].copy_from_slice(&p[from..from + take]);
            at += take as u64;
        }
        Ok(())
    }
}
