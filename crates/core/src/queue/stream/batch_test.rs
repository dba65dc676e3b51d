use super::*;

fn publish(reference: Option<&str>, ids: &[u64], inbox: &Arc<ConfirmInbox>) -> StreamPublish {
    StreamPublish {
        publisher_id: 7,
        reference: reference.map(Arc::from),
        messages: ids
            .iter()
            .map(|&id| (id, Entry::Simple(Bytes::from(id.to_string()))))
            .collect(),
        confirms: inbox.clone(),
    }
}

fn stored_ids(batch: &Batch) -> Vec<String> {
    batch
        .entries
        .iter()
        .map(|entry| match entry {
            Entry::Simple(data) => String::from_utf8(data.to_vec()).unwrap(),
            Entry::SubBatch { .. } => unreachable!(),
        })
        .collect()
}

#[test]
fn a_reference_drops_ids_at_or_below_the_last_stored_and_confirms_them() {
    let inbox = ConfirmInbox::new();
    let mut batch = Batch::default();
    // The log holds id 3 for "p": 1..=3 are duplicates, 4 and 5 are new.
    batch.add_stream(publish(Some("p"), &[2, 3, 4, 5], &inbox), |r| {
        (r == "p").then_some(3)
    });
    // Within the batch: 5 was just taken, so 5 again is a duplicate; 6 is new.
    batch.add_stream(publish(Some("p"), &[5, 6], &inbox), |_| Some(3));
    assert_eq!(stored_ids(&batch), ["4", "5", "6"]);
    assert_eq!(batch.writers(), [(Bytes::from_static(b"p"), 6)]);
    batch.take_outcomes().settle(true);
    let mut outcomes = Vec::new();
    inbox.take_all(&mut outcomes);
    assert_eq!(
        outcomes,
        [
            StreamOutcome::Confirmed {
                publisher_id: 7,
                ids: vec![2, 3, 4, 5]
            },
            StreamOutcome::Confirmed {
                publisher_id: 7,
                ids: vec![5, 6]
            },
        ]
    );
    assert!(batch.is_empty());
}

#[test]
fn without_a_reference_nothing_is_deduplicated() {
    let inbox = ConfirmInbox::new();
    let mut batch = Batch::default();
    batch.add_stream(publish(None, &[1, 1, 0], &inbox), |_| Some(10));
    assert_eq!(stored_ids(&batch), ["1", "1", "0"]);
    assert!(batch.writers().is_empty());
}

#[test]
fn a_reference_never_seen_takes_its_first_id_whatever_it_is() {
    let inbox = ConfirmInbox::new();
    let mut batch = Batch::default();
    batch.add_stream(publish(Some("new"), &[0, 0, 1], &inbox), |_| None);
    assert_eq!(stored_ids(&batch), ["0", "1"]);
    assert_eq!(batch.writers(), [(Bytes::from_static(b"new"), 1)]);
}

#[test]
fn a_failed_chunk_fails_every_publisher_with_internal_error() {
    let inbox = ConfirmInbox::new();
    let mut batch = Batch::default();
    batch.add_stream(publish(Some("p"), &[1, 2], &inbox), |_| None);
    batch.take_outcomes().settle(false);
    let mut outcomes = Vec::new();
    inbox.take_all(&mut outcomes);
    assert_eq!(
        outcomes,
        [StreamOutcome::Failed {
            publisher_id: 7,
            ids: vec![1, 2],
            code: 0x0f
        }]
    );
}

#[test]
fn the_batch_is_full_at_its_soft_limits_and_never_overflows_a_chunk() {
    let mut batch = Batch::default();
    batch.add_records(vec![Bytes::from(vec![0; CHUNK_BYTES_SOFT_MAX])], None);
    assert!(batch.is_full());
    assert!(!batch.would_overflow(CHUNK_ENTRIES_MAX - 1));
    assert!(batch.would_overflow(CHUNK_ENTRIES_MAX));
}
