//! Integration tests of weft-meta: one conformance suite (`cases`) run against every store,
//! plus each store's own behaviour (persistence, failover, fault injection).

mod cases;
mod embedded;
mod etcd;
mod faulty;
