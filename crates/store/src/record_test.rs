use proptest::prelude::*;

use super::*;
use crate::io::{read_exact_at, FsIo, Io};

fn decode_all(buf: &[u8]) -> Vec<Record> {
    let mut at = 0;
    let mut records = Vec::new();
    while at < buf.len() {
        let (record, len) = decode(buf, at).expect("every record decodes");
        records.push(record);
        at += len;
    }
    records
}

#[test]
fn records_round_trip() {
    let mut batch = RecordBatch::new();
    batch.enqueue(7, 1, FLAG_DURABLE, |b| b.extend_from_slice(b"hello"));
    batch.ack(7, &mut [5, 3, 4, 9, 9, 10]);
    batch.delivered(7, 4);
    batch.queue_deleted(8);
    let records = decode_all(&batch.buf);
    let Record::Enqueue {
        queue,
        seq,
        flags,
        message,
    } = &records[0]
    else {
        panic!("first record is an enqueue: {records:?}");
    };
    assert_eq!((*queue, *seq, *flags), (7, 1, FLAG_DURABLE));
    assert_eq!(&batch.buf[message.clone()], b"hello");
    assert_eq!(
        records[1..],
        [
            Record::Ack {
                queue: 7,
                ranges: vec![(3, 5), (9, 10)]
            },
            Record::Delivered { queue: 7, up_to: 4 },
            Record::QueueDeleted { queue: 8 },
        ]
    );
    assert_eq!(batch.durable_messages, 1);
    assert_eq!(batch.records.iter().filter(|(_, e)| *e).count(), 1);
}

#[test]
fn a_flipped_byte_fails_the_checksum() {
    let mut batch = RecordBatch::new();
    batch.enqueue(1, 1, 0, |b| b.extend_from_slice(b"payload"));
    let mut buf = batch.buf.clone();
    let last = buf.len() - 1;
    buf[last] ^= 0x20;
    assert_eq!(decode(&buf, 0), Err(RecordError::Checksum));
}

#[test]
fn a_torn_record_is_truncated() {
    let mut batch = RecordBatch::new();
    batch.enqueue(1, 1, 0, |b| b.extend_from_slice(b"payload"));
    let buf = &batch.buf[..batch.buf.len() - 3];
    assert_eq!(decode(buf, 0), Err(RecordError::Truncated));
    assert_eq!(decode(&batch.buf[..5], 0), Err(RecordError::Truncated));
}

#[test]
fn queue_ids_differ_by_vhost_and_name() {
    assert_ne!(queue_id("/", "a"), queue_id("/", "b"));
    assert_ne!(queue_id("a", "b"), queue_id("ab", ""));
    assert_eq!(queue_id("/", "orders"), queue_id("/", "orders"));
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), at in 0usize..300) {
        let _ = decode(&bytes, at);
    }

    #[test]
    fn ack_ranges_cover_exactly_the_acked_seqs(mut seqs in proptest::collection::vec(1u64..200, 1..60)) {
        let mut batch = RecordBatch::new();
        batch.ack(3, &mut seqs.clone());
        let Record::Ack { ranges, .. } = decode(&batch.buf, 0).unwrap().0 else {
            panic!("an ack record");
        };
        let mut covered: Vec<u64> = ranges.iter().flat_map(|&(a, b)| a..=b).collect();
        seqs.sort_unstable();
        seqs.dedup();
        covered.sort_unstable();
        prop_assert_eq!(covered, seqs);
    }
}

/// Two batches with the same records, one with its large body slices spliced in, one with
/// every byte copied.
fn spliced_and_copied() -> (RecordBatch, RecordBatch) {
    let body: Vec<Bytes> = vec![
        Bytes::from(vec![1u8; 5000]),
        Bytes::from_static(b"tiny"),
        Bytes::from((0..70_000u32).map(|i| i as u8).collect::<Vec<u8>>()),
    ];
    let (mut spliced, mut copied) = (RecordBatch::new(), RecordBatch::new());
    for (seq, parts) in [(2, &body[..]), (3, &body[2..]), (4, &body[1..2])] {
        let head = |b: &mut Vec<u8>| b.extend_from_slice(b"head");
        spliced.enqueue_with_body(3, seq, FLAG_DURABLE, head, parts);
        copied.enqueue(3, seq, FLAG_DURABLE, |b| {
            head(b);
            parts.iter().for_each(|c| b.extend_from_slice(c));
        });
        spliced.delivered(3, seq);
        copied.delivered(3, seq);
    }
    (spliced, copied)
}

#[test]
fn spliced_bodies_are_written_and_indexed_as_copied_ones() {
    let (spliced, copied) = spliced_and_copied();
    assert_eq!(
        spliced.spliced.len(),
        3,
        "slices of 4 KiB or more are not copied"
    );
    assert_eq!(spliced.len(), copied.buf.len());
    assert_eq!(spliced.records, copied.records);
    assert_eq!(spliced.durable_messages, 3);
    let dir = tempfile::tempdir().unwrap();
    let file = FsIo.create(&dir.path().join("whole")).unwrap();
    spliced.write_at(&*file, 0..spliced.len(), 8).unwrap();
    let mut written = vec![0; spliced.len()];
    read_exact_at(&*file, &mut written, 8).unwrap();
    assert!(
        written == copied.buf,
        "the file holds what a copying batch holds"
    );
    assert_eq!(decode_all(&written).len(), 6, "every record checks");

    let mut start = 0;
    for &(end, _) in &copied.records {
        let part = FsIo
            .create(&dir.path().join(format!("part-{start}")))
            .unwrap();
        spliced.write_at(&*part, start..end, 0).unwrap();
        let mut got = vec![0; end - start];
        read_exact_at(&*part, &mut got, 0).unwrap();
        assert!(
            got == copied.buf[start..end],
            "record at {start} written alone"
        );
        let (mut from_spliced, mut from_copied) = (Vec::new(), Vec::new());
        spliced.index_entry(start..end, 100 + start, &mut from_spliced);
        index_entry_of(
            &copied.buf[start..end],
            end - start,
            100 + start,
            &mut from_copied,
        );
        assert_eq!(
            from_spliced, from_copied,
            "index entry of the record at {start}"
        );
        start = end;
    }
}
