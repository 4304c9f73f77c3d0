//! What the command tests of this crate share: a nexus, running one CDB on a LUN, and the
//! checks of a response.

use crate::execute::execute;
use crate::lun::LunState;
use crate::mem_lun::MemLun;
use crate::nexus::Nexus;
use crate::sense::{Response, Status};

pub(crate) fn nexus() -> Nexus {
    Nexus::new("iqn.2024-01.test:host,i,0x800000000001", 1)
}

/// Run `cdb` with `data_out` on `lu`, with fresh LUN state.
pub(crate) fn run(lu: &MemLun, cdb: &[u8], data_out: &[u8]) -> Response {
    execute(&LunState::new(), lu, &nexus(), cdb, data_out)
}

pub(crate) fn assert_sense(r: &Response, key: u8, (asc, ascq): (u8, u8)) {
    assert_eq!(r.status, Status::CheckCondition, "{r:?}");
    let s = r.sense.as_ref().expect("sense");
    assert_eq!((s.key, s.asc, s.ascq), (key, asc, ascq), "{s:?}");
    assert!(r.data_in.is_empty());
}

pub(crate) fn assert_good(r: &Response) {
    assert_eq!((r.status, &r.sense), (Status::Good, &None), "{r:?}");
}

/// `len` bytes that differ with `seed`.
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}
