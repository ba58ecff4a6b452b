//! The file transfer framing a peer sends inside the byte stream: the header a receiver
//! reads first, the receiver's offer and the sender's start, and the verdict a sender reads
//! last. None may panic, none claims more bytes than it was given, an offer re-encodes to
//! exactly what it took, and a verdict's reason stays within its bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipstream_proto::wire::file::{
    FileHeader, Offer, OfferParse, Start, Verdict, VerdictParse, FILE_HEADER_LEN, MAX_OFFER_CHUNKS,
    MAX_REASON, OFFER_HEAD_LEN, START_LEN, VERDICT_HEAD_LEN,
};

fuzz_target!(|data: &[u8]| {
    if let Some(h) = data.get(..FILE_HEADER_LEN) {
        let h: &[u8; FILE_HEADER_LEN] = h.try_into().unwrap();
        if let Some(p) = FileHeader::parse(h) {
            assert_eq!(&p.encode(), h);
        }
    }
    if let Some(h) = data.get(..START_LEN) {
        let h: &[u8; START_LEN] = h.try_into().unwrap();
        if let Some(p) = Start::parse(h) {
            assert_eq!(&p.encode(), h);
        }
    }
    match Offer::parse(data) {
        OfferParse::Done(o, n) => {
            assert!(n <= data.len());
            assert!(o.chunks.len() <= MAX_OFFER_CHUNKS as usize);
            assert_eq!(n, OFFER_HEAD_LEN + 16 * o.chunks.len());
            assert_eq!(o.encode(), &data[..n]);
        }
        OfferParse::Need(n) => assert!(n > data.len()),
        OfferParse::Malformed(_) => {}
    }
    match Verdict::parse(data) {
        VerdictParse::Done(v, n) => {
            assert!(n <= data.len() && n <= VERDICT_HEAD_LEN + MAX_REASON);
            if let Verdict::Failed(r) = v {
                assert!(!r.chars().any(char::is_control));
            }
        }
        VerdictParse::Need(n) => assert!(n > data.len()),
        VerdictParse::Malformed(_) => {}
    }
});
