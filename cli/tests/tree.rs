//! Directory trees end to end: `slipstream send DIR` to `slipstream recv ... DIR` on
//! loopback, resumed trees, and a hostile sender built on the library against a real
//! receiver process.

mod common;

use common::{free_port, spawn_send, text};
use slipstream::api::{Endpoint, EndpointOptions};
use slipstream_proto::conn::{ConnConfig, Mode};
use slipstream_proto::wire::tree::{Entry, Kind, TREE_MAGIC};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_slipstream");

fn tmpdir(name: &str) -> PathBuf {
    common::tmpdir("tree", name)
}

fn spawn_recv(port: u16, out: &Path) -> Child {
    Command::new(BIN)
        .args(["recv", &format!("srt://127.0.0.1:{port}?mode=listener")])
        .arg(out)
        .args(["--quiet", "--accept-timeout", "20"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One whole transfer of `dir` into `out`; both must succeed. Returns both stderrs.
fn transfer(dir: &Path, out: &Path) -> (String, String) {
    let port = free_port();
    let rx = spawn_recv(port, out);
    let tx = spawn_send(dir, port, &[]).wait_with_output().unwrap();
    let rx = rx.wait_with_output().unwrap();
    let (tx_err, rx_err) = (text(&tx.stderr), text(&rx.stderr));
    assert!(tx.status.success(), "send: {tx_err}");
    assert!(rx.status.success(), "recv: {rx_err}");
    (tx_err, rx_err)
}

/// Every entry of `a` is in `b` with the same kind, bytes, mode and modification time, and
/// `b` has nothing else; symbolic links in `a` are expected absent from `b`.
fn same_tree(a: &Path, b: &Path) {
    let diff = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(a)
        .arg(b)
        .output()
        .unwrap();
    let out = text(&diff.stdout);
    for line in out.lines() {
        // diff reports what only one side has; only the links may be missing.
        assert!(
            line.starts_with("Only in") && line.contains("link"),
            "trees differ: {out}"
        );
    }
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, u32, i64, i64)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.file_type().is_symlink() {
                continue;
            }
            let rel = e.path().strip_prefix(root).unwrap().to_path_buf();
            out.push((rel, m.mode() & 0o7777, m.mtime(), m.mtime_nsec()));
            if m.is_dir() {
                walk(root, &e.path(), out);
            }
        }
    }
    let (mut x, mut y) = (Vec::new(), Vec::new());
    walk(a, a, &mut x);
    walk(b, b, &mut y);
    x.sort();
    y.sort();
    assert_eq!(x.len(), y.len());
    for (p, q) in x.iter().zip(&y) {
        assert_eq!(p, q, "mode or time differs");
    }
}

/// A tree of `n` small files over `dirs` directories, with empty directories, unicode and
/// space names, odd modes and old times, a larger file, and a link pointing out of it.
fn make_tree(root: &Path, n: usize, dirs: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("d{d:03} ünï cødé"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..n / dirs {
            let p = dir.join(format!("f {f:04}.bin"));
            let body: Vec<u8> = (0..4096)
                .map(|i| ((i * 7 + f * 13 + d) % 251) as u8)
                .collect();
            std::fs::write(&p, body).unwrap();
        }
    }
    std::fs::create_dir_all(root.join("empty/deeper/still empty")).unwrap();
    let odd = root.join("odd mode.txt");
    std::fs::write(&odd, b"read only\n").unwrap();
    std::fs::set_permissions(&odd, std::fs::Permissions::from_mode(0o444)).unwrap();
    let big: Vec<u8> = (0..(20usize << 20))
        .map(|i| (i % 253) as u8 ^ (i >> 16) as u8)
        .collect();
    std::fs::write(root.join("big.bin"), big).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("escape link")).unwrap();
    let ok = Command::new("touch")
        .args(["-h", "-d", "2001-02-03 04:05:06.789"])
        .arg(&odd)
        .arg(root.join("empty/deeper"))
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// The issue's tree: 10,000 files, empty directories, unicode and space names, modes and
/// times, a link that is not followed. The same command again sends nothing; a tree
/// interrupted in its large file resumes inside it.
#[test]
fn a_tree_of_ten_thousand_files_arrives_identical_and_resumes() {
    let dir = tmpdir("10k");
    let src = dir.join("tree src");
    make_tree(&src, 10_000, 50);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let (tx_err, rx_err) = transfer(&src, &out);
    same_tree(&src, &out.join("tree src"));
    assert!(tx_err.contains("escape link: a symbolic link"), "{tx_err}");
    assert!(rx_err.contains("10002 files"), "{rx_err}");
    assert!(!out.join("tree src/escape link").exists());

    // Again: every file is there and identical, nothing is carried.
    let (tx_err, _) = transfer(&src, &out);
    assert!(tx_err.contains(": 0 bytes carried"), "{tx_err}");
    assert!(tx_err.contains("10002 identical"), "{tx_err}");

    // A changed file is sent again only with --force... here it is removed and the big
    // one cut to a part: the same command sends the small one and the big one's rest.
    let one = out.join("tree src/d000 ünï cødé/f 0000.bin");
    std::fs::remove_file(&one).unwrap();
    let big = out.join("tree src/big.bin");
    let part = out.join("tree src/big.bin.part");
    std::fs::rename(&big, &part).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&part).unwrap();
    f.set_len(13 << 20).unwrap();
    drop(f);
    let (tx_err, _) = transfer(&src, &out);
    assert!(
        tx_err.contains("1 resumed (8388608 bytes kept)"),
        "{tx_err}"
    );
    assert!(tx_err.contains("10000 identical"), "{tx_err}");
    same_tree(&src, &out.join("tree src"));
    assert!(!part.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file in the way without --force fails that file, the others arrive, and both ends
/// exit non-zero naming it.
#[test]
fn a_differing_file_in_the_way_fails_the_tree_but_not_the_others() {
    let dir = tmpdir("in-the-way");
    let src = dir.join("t");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("a/keep.txt"), b"theirs").unwrap();
    std::fs::write(src.join("a/new.txt"), b"new").unwrap();
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("t/a")).unwrap();
    std::fs::write(out.join("t/a/keep.txt"), b"mine").unwrap();
    let port = free_port();
    let rx = spawn_recv(port, &out);
    let tx = spawn_send(&src, port, &[]).wait_with_output().unwrap();
    let rx = rx.wait_with_output().unwrap();
    let (tx_err, rx_err) = (text(&tx.stderr), text(&rx.stderr));
    assert!(
        !tx.status.success() && !rx.status.success(),
        "{tx_err} {rx_err}"
    );
    assert!(
        tx_err.contains("a/keep.txt: exists and differs"),
        "{tx_err}"
    );
    assert_eq!(std::fs::read(out.join("t/a/keep.txt")).unwrap(), b"mine");
    assert_eq!(std::fs::read(out.join("t/a/new.txt")).unwrap(), b"new");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hostile sender, on the library: connects to a real receiver and offers `entries` (a
/// manifest written by hand). Returns the receiver's output.
fn hostile(out: &Path, name: &str, manifest: &[u8], body: &[u8]) -> Output {
    let port = free_port();
    let rx = spawn_recv(port, out);
    std::thread::sleep(Duration::from_millis(200));
    let ep = Endpoint::bind("127.0.0.1:0".parse().unwrap(), EndpointOptions::default()).unwrap();
    let mut cfg = ConnConfig::new(Mode::File);
    cfg.set_file_digest(true);
    cfg.set_stream_id(Some(name.as_bytes().to_vec()));
    let conn = ep
        .connect(format!("127.0.0.1:{port}").parse().unwrap(), cfg)
        .unwrap();
    assert!(conn.verdict_agreed());
    let mut stream = TREE_MAGIC.to_vec();
    stream.extend_from_slice(&(manifest.len() as u64).to_be_bytes());
    stream.extend_from_slice(manifest);
    stream.extend_from_slice(body);
    let mut sent = 0;
    while sent < stream.len() {
        sent += conn.send(&stream[sent..]).unwrap();
    }
    let rx = rx.wait_with_output().unwrap();
    drop(conn);
    rx
}

/// What follows the manifest of a one-file tree: the file's start, its bytes and digest, and
/// the end (sent without waiting for the plan, which comes back first).
fn one_file(content: &[u8]) -> Vec<u8> {
    let mut body = slipstream_proto::wire::tree::FileStart {
        index: 0,
        offset: 0,
    }
    .encode()
    .to_vec();
    body.extend_from_slice(content);
    body.extend_from_slice(&slipstream::transfer::digest(content));
    body.extend_from_slice(&slipstream_proto::wire::tree::Next::end(1));
    body
}

fn file_entry(path: &[u8], size: u64) -> Entry {
    Entry {
        kind: Kind::File(size),
        path: path.to_vec(),
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
    }
}

/// `../x`, `/etc/x`, `a/../../x` and a path through a symbolic link: the receiver writes
/// nothing outside its directory and says why.
#[test]
fn a_hostile_sender_writes_nothing_outside_the_receivers_directory() {
    let dir = tmpdir("hostile");
    let out = dir.join("out");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    for path in [&b"../x"[..], b"/etc/x", b"a/../../x", b"a//x", b"ok/\0x"] {
        let mut m = Vec::new();
        file_entry(path, 3).encode(&mut m);
        let rx = hostile(&out, "t", &m, b"");
        let err = text(&rx.stderr);
        assert!(!rx.status.success(), "{err}");
        assert!(err.contains("manifest") && err.contains("entry 0"), "{err}");
        assert!(!out.join("t").exists(), "a refused manifest created {err}");
    }
    // Set-user-ID and sticky bits are not applied.
    let mut m = Vec::new();
    let mut e = file_entry(b"suid", 3);
    e.mode = 0o4755;
    e.encode(&mut m);
    let rx = hostile(&out, "s", &m, &one_file(b"abc"));
    assert!(rx.status.success(), "{}", text(&rx.stderr));
    let mode = std::fs::metadata(out.join("s/suid")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    // A link inside the receiver's directory pointing out of it is not followed.
    std::fs::create_dir_all(out.join("t")).unwrap();
    std::os::unix::fs::symlink(&outside, out.join("t/a")).unwrap();
    let mut m = Vec::new();
    file_entry(b"a/x", 3).encode(&mut m);
    let rx = hostile(&out, "t", &m, &one_file(b"abc"));
    let err = text(&rx.stderr);
    assert!(!rx.status.success(), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `recv --serve` takes three senders at once (two files and a tree) and a fourth after
/// them, a line of JSON each; SIGTERM while a slow one runs cuts it short, keeps its part
/// for a resume, tells its sender at once, and exits 0.
#[test]
fn a_serving_receiver_takes_concurrent_senders_until_stopped() {
    let dir = tmpdir("serve");
    let out = dir.join("in");
    std::fs::create_dir_all(&out).unwrap();
    let a: Vec<u8> = (0..(6usize << 20)).map(|i| (i % 241) as u8).collect();
    let b: Vec<u8> = (0..(5usize << 20)).map(|i| (i % 239) as u8).collect();
    std::fs::write(dir.join("a.bin"), &a).unwrap();
    std::fs::write(dir.join("b.bin"), &b).unwrap();
    let src = dir.join("t");
    make_tree(&src, 200, 4);
    let port = free_port();
    let server = Command::new(BIN)
        .args(["recv", "--serve", "--json", "--quiet"])
        .arg(format!("srt://127.0.0.1:{port}?mode=listener"))
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let senders: Vec<Child> = [dir.join("a.bin"), dir.join("b.bin"), src.clone()]
        .iter()
        .map(|p| spawn_send(p, port, &["--max-rate", "100mbit"]))
        .collect();
    for s in senders {
        let o = s.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    assert_eq!(std::fs::read(out.join("a.bin")).unwrap(), a);
    assert_eq!(std::fs::read(out.join("b.bin")).unwrap(), b);
    same_tree(&src, &out.join("t"));
    // A slow one, stopped halfway.
    let big: Vec<u8> = (0..(40usize << 20)).map(|i| (i % 233) as u8).collect();
    std::fs::write(dir.join("slow.bin"), &big).unwrap();
    let slow = spawn_send(&dir.join("slow.bin"), port, &["--max-rate", "40mbit"]);
    let part = out.join("slow.bin.part");
    let t0 = std::time::Instant::now();
    while std::fs::metadata(&part).map_or(0, |m| m.len()) < 4 << 20 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the slow send never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ok = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let t1 = std::time::Instant::now();
    let server = server.wait_with_output().unwrap();
    let slow = slow.wait_with_output().unwrap();
    assert!(t1.elapsed() < Duration::from_secs(5));
    let (lines, err) = (text(&server.stdout), text(&server.stderr));
    assert!(server.status.success(), "{err}");
    assert!(!slow.status.success());
    assert!(
        err.contains("stopped by SIGTERM: 3 received, 1 failed"),
        "{err}"
    );
    let objs: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objs.len(), 4, "{lines}");
    assert_eq!(
        objs.iter().filter(|o| o["ok"] == true).count(),
        3,
        "{lines}"
    );
    assert!(objs.iter().any(|o| o["kind"] == "tree" && o["name"] == "t"));
    assert!(std::fs::metadata(&part).unwrap().len() >= 4 << 20);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tree through the built-in emulator's loss and delay on both ends, then the same
/// command again sends nothing.
#[test]
fn a_tree_crosses_a_lossy_path() {
    let dir = tmpdir("lossy");
    let src = dir.join("t");
    make_tree(&src, 1000, 10);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let lossy = ["--netem", "loss=1%,delay=5ms"];
    for round in 0..2 {
        let port = free_port();
        let rx = Command::new(BIN)
            .args(["recv", &format!("srt://127.0.0.1:{port}?mode=listener")])
            .arg(&out)
            .args(["--quiet", "--accept-timeout", "20"])
            .args(lossy)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let tx = spawn_send(&src, port, &lossy).wait_with_output().unwrap();
        let rx = rx.wait_with_output().unwrap();
        let tx_err = text(&tx.stderr);
        assert!(tx.status.success(), "round {round}: {tx_err}");
        assert!(rx.status.success(), "round {round}: {}", text(&rx.stderr));
        same_tree(&src, &out.join("t"));
        if round == 1 {
            assert!(tx_err.contains(": 0 bytes carried"), "{tx_err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
