//! Test 2: damaged records on disk (see the crate doc): a flipped byte in a body and a torn
//! last record are skipped at startup with a WARN line naming the file and the offset.

use super::*;

const CORRUPT_QUEUE: &str = "crash-corrupt";
const CORRUPT_COUNT: usize = 200;
/// The message whose body gets one byte flipped.
const CORRUPT_VICTIM: usize = 100;
const CORRUPT_BODY_LEN: usize = 100;
const CORRUPT_PREFIX: &[u8] = b"crash-test-msg-";
const TEST2_LIMIT: Duration = Duration::from_secs(60);

fn corrupt_body(index: usize) -> Vec<u8> {
    let mut body = format!("crash-test-msg-{index:05}-").into_bytes();
    body.resize(CORRUPT_BODY_LEN, b'=');
    body
}

/// A segment file's name and bytes.
struct Segment {
    path: PathBuf,
    bytes: Vec<u8>,
}

/// Where a body lies: segment index and byte offset in it.
#[derive(Clone, Copy, Debug)]
struct Place {
    segment: usize,
    at: usize,
}

/// The `.seg` files of `<data_dir>/store`, in name order (which is write order).
fn read_segments(data_dir: &Path) -> Vec<Segment> {
    let store = data_dir.join("store");
    let entries = std::fs::read_dir(&store).unwrap_or_else(|error| {
        panic!(
            "{} cannot be read ({error}) after {CORRUPT_COUNT} confirmed persistent messages and \
             kill -9: the broker keeps no message store on disk",
            store.display()
        )
    });
    let mut paths: Vec<PathBuf> = entries
        .map(|entry| entry.expect("read a store directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
        .collect();
    assert!(
        !paths.is_empty(),
        "no .seg file in {} after {CORRUPT_COUNT} confirmed persistent messages and kill -9",
        store.display()
    );
    paths.sort();
    let read = |path: PathBuf| {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        Segment { path, bytes }
    };
    paths.into_iter().map(read).collect()
}

/// Where each test body is stored; each must be there verbatim exactly once.
fn locate_bodies(segments: &[Segment]) -> Vec<Place> {
    let mut places: Vec<Vec<Place>> = vec![Vec::new(); CORRUPT_COUNT];
    for (segment, file) in segments.iter().enumerate() {
        let bytes = &file.bytes;
        let mut from = 0;
        while let Some(found) = find(&bytes[from..], CORRUPT_PREFIX) {
            let at = from + found;
            from = at + 1;
            let digits = &bytes[at + CORRUPT_PREFIX.len()..bytes.len().min(at + 20)];
            let index = std::str::from_utf8(digits.get(..5).unwrap_or_default())
                .ok()
                .and_then(|text| text.parse::<usize>().ok());
            let Some(index) = index.filter(|&index| index < CORRUPT_COUNT) else {
                continue;
            };
            if bytes[at..].starts_with(&corrupt_body(index)) {
                places[index].push(Place { segment, at });
            }
        }
    }
    let describe = |index: usize, found: &Vec<Place>| -> Place {
        assert!(
            found.len() == 1,
            "message {index}'s body should be stored verbatim exactly once in the .seg files, \
             found {} times: {found:?}",
            found.len()
        );
        found[0]
    };
    places
        .iter()
        .enumerate()
        .map(|(i, found)| describe(i, found))
        .collect()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The byte range that must contain the offset a WARN line reports for the damaged record of
/// message `index`, whose bytes are damaged from `damaged_at` on: the record starts after the
/// previous body in the same file (or at 0), and at or before the damaged byte.
fn record_range(places: &[Place], index: usize, damaged_at: usize) -> (usize, usize) {
    let place = places[index];
    let low = match index.checked_sub(1).map(|before| places[before]) {
        Some(before) if before.segment == place.segment => before.at + CORRUPT_BODY_LEN,
        _ => 0,
    };
    (low, damaged_at + 1)
}

/// The numbers that follow the word `offset` in a log line (`offset=12`, `offset: 12`, ...).
fn offsets_in(line: &str) -> Vec<usize> {
    line.match_indices("offset")
        .filter_map(|(at, word)| {
            let rest = line[at + word.len()..].trim_start_matches([' ', '=', ':', '"']);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// Asserts a WARN line names `file` and reports an offset in `low..high`.
fn expect_warning(warnings: &[String], file: &Path, (low, high): (usize, usize), what: &str) {
    let name = file
        .file_name()
        .expect("segment file name")
        .to_string_lossy();
    let found = warnings.iter().any(|line| {
        line.contains(name.as_ref())
            && offsets_in(line)
                .iter()
                .any(|offset| (low..high).contains(offset))
    });
    assert!(
        found,
        "no WARN line names {} with `offset` in {low}..{high} for {what}; WARN lines:\n{}",
        file.display(),
        warnings.join("\n")
    );
}

async fn publish_numbered(broker: &BrokerProcess) {
    let connection = must("connect", connect(&broker.url())).await;
    let channel = must("open a channel", connection.create_channel()).await;
    declare_durable(&channel, CORRUPT_QUEUE).await;
    must(
        "confirm.select",
        channel.confirm_select(ConfirmSelectOptions::default()),
    )
    .await;
    let mut confirms = Vec::new();
    for index in 0..CORRUPT_COUNT {
        let body = corrupt_body(index);
        let publish = channel.basic_publish(
            "".into(),
            CORRUPT_QUEUE.into(),
            BasicPublishOptions::default(),
            &body,
            persistent(),
        );
        confirms.push(must(format!("publish message {index}"), publish).await);
    }
    for (index, confirm) in confirms.into_iter().enumerate() {
        let confirmation = must(format!("confirm of message {index}"), confirm).await;
        assert!(
            confirmation.is_ack(),
            "message {index} was not confirmed: {confirmation:?}"
        );
    }
}

/// Flips a byte in the victim's body and tears the last record; returns the expected WARN
/// ranges: (flipped file, range) and (torn file, range).
fn damage(segments: &mut [Segment], places: &[Place]) -> [(PathBuf, (usize, usize)); 2] {
    let victim = places[CORRUPT_VICTIM];
    let file = &mut segments[victim.segment];
    let flip_at = victim.at + CORRUPT_BODY_LEN / 2;
    file.bytes[flip_at] ^= 0xff;
    std::fs::write(&file.path, &file.bytes).expect("write the flipped segment");
    let flipped = (
        file.path.clone(),
        record_range(places, CORRUPT_VICTIM, flip_at),
    );

    let last = CORRUPT_COUNT - 1;
    let torn = places[last];
    assert_eq!(
        torn.segment,
        segments.len() - 1,
        "the last message should be in the last segment file (names sort in write order)"
    );
    let file = &segments[torn.segment];
    let cut = torn.at + CORRUPT_BODY_LEN / 2;
    let handle = std::fs::OpenOptions::new()
        .write(true)
        .open(&file.path)
        .unwrap_or_else(|error| panic!("open {}: {error}", file.path.display()));
    handle
        .set_len(cut as u64)
        .expect("truncate the last segment");
    handle.sync_all().expect("sync the truncated segment");
    [
        flipped,
        (file.path.clone(), record_range(places, last, cut)),
    ]
}

async fn corrupt_scenario() {
    let data_dir = tempfile::Builder::new()
        .prefix("warren-corrupt-")
        .tempdir()
        .expect("create a temporary data dir");
    let mut broker = BrokerProcess::start(data_dir.path()).await;
    publish_numbered(&broker).await;
    broker.kill();
    drop(broker);

    let mut segments = read_segments(data_dir.path());
    let places = locate_bodies(&segments);
    let [flipped, torn] = damage(&mut segments, &places);

    let broker = BrokerProcess::start(data_dir.path()).await;
    let warnings = broker.warnings();
    expect_warning(&warnings, &flipped.0, flipped.1, "the flipped byte");
    expect_warning(&warnings, &torn.0, torn.1, "the torn last record");

    let connection = must("connect after the restart", connect(&broker.url())).await;
    let scan = scan_queue(&connection, CORRUPT_QUEUE, "after the restart").await;
    let got: Vec<String> = scan
        .iter()
        .map(|(body, _)| describe_corrupt(body))
        .collect();
    let want: Vec<String> = (0..CORRUPT_COUNT)
        .filter(|&index| index != CORRUPT_VICTIM && index != CORRUPT_COUNT - 1)
        .map(|index| describe_corrupt(&corrupt_body(index)))
        .collect();
    let missing: Vec<&String> = want.iter().filter(|body| !got.contains(body)).collect();
    let extra: Vec<&String> = got.iter().filter(|body| !want.contains(body)).collect();
    assert!(
        got == want,
        "after the restart the queue should hold every message except {CORRUPT_VICTIM} (flipped) \
         and {} (torn), in order; missing {missing:?}, unexpected {extra:?}, got {} messages",
        CORRUPT_COUNT - 1,
        got.len()
    );
}

/// A short name for a body: `msg 42` for a test body, else the text.
fn describe_corrupt(body: &[u8]) -> String {
    let index = (0..CORRUPT_COUNT).find(|&index| corrupt_body(index) == body);
    match index {
        Some(index) => format!("msg {index}"),
        None => format!("{:?}", String::from_utf8_lossy(body)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_segment_tail_is_skipped_with_a_log_line() {
    let finished = tokio::time::timeout(TEST2_LIMIT, corrupt_scenario()).await;
    assert!(
        finished.is_ok(),
        "the corruption test did not finish within {TEST2_LIMIT:?}"
    );
}
