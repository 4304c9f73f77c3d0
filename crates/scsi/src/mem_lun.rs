//! [`MemLun`], an in-memory [`LogicalUnit`] for tests and fuzzing (here and in the transport's
//! tests): the whole LU is a `Vec<u8>` plus a per-block allocation map. It records the calls
//! it receives (bounded) and can be told to fail every call with a [`MediumError`].
//!
//! Not for production: it allocates the whole LU up front, and refuses sizes over
//! [`MEM_LUN_MAX_BYTES`].

use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::lun::{Geometry, Identity, LogicalUnit, MediumError};

/// Largest LU a `MemLun` holds: 256 MiB of test memory.
pub const MEM_LUN_MAX_BYTES: u64 = 256 << 20;
/// Calls remembered; older ones are dropped.
const CALLS_MAX: usize = 1024;

/// One call the LU received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Read {
        offset_bytes: u64,
        len_bytes: u64,
    },
    Write {
        offset_bytes: u64,
        len_bytes: u64,
        fua: bool,
    },
    Flush,
    Unmap {
        offset_bytes: u64,
        len_bytes: u64,
    },
    WriteZeroes {
        offset_bytes: u64,
        len_bytes: u64,
        unmap: bool,
    },
    Allocation {
        offset_bytes: u64,
        len_bytes: u64,
    },
}

/// An in-memory logical unit. Blocks start deallocated (reading zeroes).
#[derive(Debug)]
pub struct MemLun {
    geometry: Geometry,
    identity: Identity,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    data: Vec<u8>,
    mapped: Vec<bool>,
    calls: VecDeque<Call>,
    fault: Option<MediumError>,
}

/// The identity the tests use: vendor "WEFT", product "weft volume", revision "0.1", target
/// port group 7, relative target port 1.
pub fn test_identity() -> Identity {
    let mut naa_id = [0u8; 16];
    naa_id[0] = 0x60;
    naa_id[15] = 0x01;
    Identity {
        vendor: "WEFT".into(),
        product: "weft volume".into(),
        revision: "0.1".into(),
        serial: "vol-0001".into(),
        naa_id,
        target_port_group: 7,
        relative_target_port: 1,
        group_ports: vec![1, 2],
        target_name: "iqn.2024-01.io.weft:test".into(),
    }
}

impl MemLun {
    /// A writable LU of `block_count` blocks of `block_size_bytes`, 4 KiB physical blocks, the
    /// test identity.
    pub fn with_blocks(block_size_bytes: u32, block_count: u64) -> Self {
        Self::with_geometry(
            Geometry {
                block_size_bytes,
                block_count,
                physical_block_size_bytes: block_size_bytes.max(4096),
                read_only: false,
            },
            test_identity(),
        )
    }

    /// An LU of any geometry. Panics if it is larger than [`MEM_LUN_MAX_BYTES`]: a test bug.
    pub fn with_geometry(geometry: Geometry, identity: Identity) -> Self {
        let size_bytes = geometry
            .block_count
            .checked_mul(u64::from(geometry.block_size_bytes))
            .filter(|&size| size <= MEM_LUN_MAX_BYTES)
            .expect("MemLun size within MEM_LUN_MAX_BYTES");
        let blocks = usize::try_from(geometry.block_count).expect("checked above");
        MemLun {
            geometry,
            identity,
            inner: Mutex::new(Inner {
                data: vec![0u8; usize::try_from(size_bytes).expect("checked above")],
                mapped: vec![false; blocks],
                calls: VecDeque::new(),
                fault: None,
            }),
        }
    }

    /// The same LU, reporting itself read-only.
    pub fn with_read_only(mut self, read_only: bool) -> Self {
        self.geometry.read_only = read_only;
        self
    }

    /// Make every storage call fail with `fault` (or stop failing with `None`).
    pub fn set_fault(&self, fault: Option<MediumError>) {
        self.inner.lock().fault = fault;
    }

    /// The calls received since the last `take_calls` (at most the last 1024).
    pub fn take_calls(&self) -> Vec<Call> {
        self.inner.lock().calls.drain(..).collect()
    }

    /// A copy of `len_bytes` bytes from `offset_bytes` (clipped to the LU).
    pub fn bytes(&self, offset_bytes: u64, len_bytes: usize) -> Vec<u8> {
        let inner = self.inner.lock();
        let start = usize::try_from(offset_bytes)
            .unwrap_or(usize::MAX)
            .min(inner.data.len());
        let end = start.saturating_add(len_bytes).min(inner.data.len());
        inner.data[start..end].to_vec()
    }

    /// Whether a block is allocated.
    pub fn is_mapped(&self, lba: u64) -> bool {
        let inner = self.inner.lock();
        usize::try_from(lba)
            .ok()
            .and_then(|i| inner.mapped.get(i).copied())
            .unwrap_or(false)
    }

    /// Record `call`, fail with the fault if one is set, and check that a byte range is whole
    /// blocks inside the LU, returning it as indices into `data`.
    fn begin(
        &self,
        inner: &mut Inner,
        call: Call,
        range: Option<(u64, u64)>,
    ) -> Result<(usize, usize), MediumError> {
        if inner.calls.len() == CALLS_MAX {
            inner.calls.pop_front();
        }
        inner.calls.push_back(call);
        if let Some(fault) = &inner.fault {
            return Err(fault.clone());
        }
        let Some((offset, len)) = range else {
            return Ok((0, 0));
        };
        let block = u64::from(self.geometry.block_size_bytes);
        let end = offset.checked_add(len);
        match end {
            Some(end)
                if end <= inner.data.len() as u64 && offset % block == 0 && len % block == 0 =>
            {
                let start = usize::try_from(offset).map_err(|_| out_of_range())?;
                let end = usize::try_from(end).map_err(|_| out_of_range())?;
                Ok((start, end))
            }
            _ => Err(out_of_range()),
        }
    }

    fn block_index(&self, byte: usize) -> usize {
        byte / self.geometry.block_size_bytes.max(1) as usize
    }

    fn fill_zeroes(&self, inner: &mut Inner, start: usize, end: usize, mapped: bool) {
        inner.data[start..end].fill(0);
        let (first, last) = (self.block_index(start), self.block_index(end));
        inner.mapped[first..last].fill(mapped);
    }
}

fn out_of_range() -> MediumError {
    MediumError::Io("range outside the MemLun or not whole blocks".into())
}

impl LogicalUnit for MemLun {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn identity(&self) -> &Identity {
        &self.identity
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        let mut inner = self.inner.lock();
        let len_bytes = buf.len() as u64;
        let call = Call::Read {
            offset_bytes,
            len_bytes,
        };
        let (start, end) = self.begin(&mut inner, call, Some((offset_bytes, len_bytes)))?;
        buf.copy_from_slice(&inner.data[start..end]);
        Ok(())
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), MediumError> {
        let mut inner = self.inner.lock();
        let len_bytes = data.len() as u64;
        let call = Call::Write {
            offset_bytes,
            len_bytes,
            fua,
        };
        let (start, end) = self.begin(&mut inner, call, Some((offset_bytes, len_bytes)))?;
        if self.geometry.read_only {
            return Err(MediumError::ReadOnly);
        }
        inner.data[start..end].copy_from_slice(data);
        let (first, last) = (self.block_index(start), self.block_index(end));
        inner.mapped[first..last].fill(true);
        Ok(())
    }

    fn flush(&self) -> Result<(), MediumError> {
        let mut inner = self.inner.lock();
        self.begin(&mut inner, Call::Flush, None).map(|_| ())
    }

    fn unmap(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MediumError> {
        let mut inner = self.inner.lock();
        let call = Call::Unmap {
            offset_bytes,
            len_bytes,
        };
        let (start, end) = self.begin(&mut inner, call, Some((offset_bytes, len_bytes)))?;
        if self.geometry.read_only {
            return Err(MediumError::ReadOnly);
        }
        self.fill_zeroes(&mut inner, start, end, false);
        Ok(())
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        unmap: bool,
    ) -> Result<(), MediumError> {
        let mut inner = self.inner.lock();
        let call = Call::WriteZeroes {
            offset_bytes,
            len_bytes,
            unmap,
        };
        let (start, end) = self.begin(&mut inner, call, Some((offset_bytes, len_bytes)))?;
        if self.geometry.read_only {
            return Err(MediumError::ReadOnly);
        }
        self.fill_zeroes(&mut inner, start, end, !unmap);
        Ok(())
    }

    fn allocation(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<Vec<(u64, bool)>, MediumError> {
        let mut inner = self.inner.lock();
        let call = Call::Allocation {
            offset_bytes,
            len_bytes,
        };
        let (start, end) = self.begin(&mut inner, call, Some((offset_bytes, len_bytes)))?;
        let block = u64::from(self.geometry.block_size_bytes);
        let mut extents: Vec<(u64, bool)> = Vec::new();
        for &mapped in &inner.mapped[self.block_index(start)..self.block_index(end)] {
            match extents.last_mut() {
                Some(last) if last.1 == mapped => last.0 += block,
                _ => extents.push((block, mapped)),
            }
        }
        Ok(extents)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_map_blocks_and_unmap_zeroes_them() {
        let lu = MemLun::with_blocks(512, 8);
        lu.write(512, &[9; 1024], false).expect("write");
        assert!(lu.is_mapped(1) && lu.is_mapped(2) && !lu.is_mapped(3));
        assert_eq!(
            lu.allocation(0, 4096).expect("allocation"),
            vec![(512, false), (1024, true), (2560, false)]
        );
        lu.unmap(1024, 512).expect("unmap");
        assert_eq!(lu.bytes(1024, 512), vec![0; 512]);
        assert_eq!(lu.bytes(512, 2), vec![9, 9]);
        lu.write_zeroes(0, 512, false).expect("zeroes");
        assert!(lu.is_mapped(0));
    }

    #[test]
    fn bad_ranges_and_faults_are_errors_not_panics() {
        let lu = MemLun::with_blocks(512, 8);
        let mut buf = [0u8; 512];
        assert!(lu.read(4096, &mut buf).is_err());
        assert!(lu.read(1, &mut buf).is_err());
        assert!(lu.unmap(u64::MAX, 512).is_err());
        lu.set_fault(Some(MediumError::Gone));
        assert_eq!(lu.flush(), Err(MediumError::Gone));
        lu.set_fault(None);
        assert_eq!(lu.flush(), Ok(()));
        assert_eq!(lu.take_calls().len(), 5);
        let ro = MemLun::with_blocks(512, 8).with_read_only(true);
        assert_eq!(ro.write(0, &buf, false), Err(MediumError::ReadOnly));
    }

    #[test]
    fn call_log_is_bounded() {
        let lu = MemLun::with_blocks(512, 1);
        for _ in 0..CALLS_MAX + 10 {
            lu.flush().expect("flush");
        }
        assert_eq!(lu.take_calls().len(), CALLS_MAX);
    }
}
