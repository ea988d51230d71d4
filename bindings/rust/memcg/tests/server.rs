//! The HTTP endpoint (feature `http`): options refused by name and value, nothing changed;
//! start refused with the library's message; started with writes and actions behind a token,
//! an operator's kill over HTTP/1.0 from 127.0.0.1 reaching the member's kill callback with
//! the Operator reason and the event stream as an action about its group; stop; drop while running.
#![cfg(feature = "http")]
use memcg::http::Server;
use memcg::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

const MIB: u64 = 1 << 20;
const WAIT: Duration = Duration::from_secs(10);

/// One HTTP/1.0 exchange with 127.0.0.1:`port`: the status and the whole answer; None when
/// nothing listens.
fn request(port: u16, text: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), WAIT).ok()?;
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.set_write_timeout(Some(WAIT)).unwrap();
    s.write_all(text.as_bytes()).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    Some((status, answer))
}

#[test]
fn options_are_refused_by_name_and_value() {
    let ctl = Controller::new().unwrap();
    let s = Server::new(&ctl).unwrap();
    let einval = |name: &str, value: &str| s.set(name, value).unwrap_err().code();
    assert_eq!(einval("no_such_option", "1"), Some(22));
    assert_eq!(einval("port", "http"), Some(22));
    assert_eq!(einval("port", ""), Some(22));
    assert_eq!(einval("threads", "-1"), Some(22));
    assert_eq!(einval("allow_writes", "yes"), Some(22));
    assert_eq!(einval("unix_allowed_uids", "1,"), Some(22));
    assert!(matches!(
        s.set("port\0", "1"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        s.set("address", "127.0.0.1\0"),
        Err(Error::InvalidArgument(_))
    ));
    // A refused token is not shown in the error.
    let e = s.set("token\0x", "s3cret").unwrap_err();
    assert!(!e.to_string().contains("s3cret"), "{e}");
    let e = s.set("token", "s3c\0ret").unwrap_err();
    assert!(!e.to_string().contains("s3c"), "{e}");
    // Ranges are checked at start, the message naming the option; it stays stopped.
    s.set("threads", "1000").unwrap();
    let e = s.start().unwrap_err();
    assert_eq!(e.code(), Some(22));
    assert!(e.to_string().contains("threads"), "{e}");
    assert!(!s.running());
    assert_eq!(s.port(), 0);
    // Writes without a token.
    s.set("threads", "2")
        .unwrap()
        .set("allow_writes", "1")
        .unwrap();
    let e = s.start().unwrap_err();
    assert_eq!(e.code(), Some(22));
    assert!(e.to_string().contains("token"), "{e}");
    assert!(!s.running());
    assert_eq!(ctl.open_handles(), 1); // the server is a handle
    drop(s);
    assert_eq!(ctl.open_handles(), 0);
}

#[test]
fn an_operator_kills_a_member_over_http() {
    let ctl = Controller::new().unwrap();
    let q = ctl.create_group("q").unwrap();
    let reasons: Arc<Mutex<Vec<CancelReason>>> = Arc::default();
    let r = reasons.clone();
    let member = Member::with_kill(&q, "query-1", 0, move |_, reason| {
        r.lock().unwrap().push(reason);
    })
    .unwrap();
    member.charge(MIB, flags::DEFAULT).unwrap();
    // An action on a member is an event about its group (docs/http.md).
    let actions = ctl
        .subscribe(&SubscribeOptions::new().kinds([EventKind::Action]))
        .unwrap();

    let server = Server::new(&ctl).unwrap();
    server
        .set("address", "127.0.0.1")
        .unwrap()
        .set("port", "0")
        .unwrap()
        .set("threads", "2")
        .unwrap()
        .set("allow_writes", "true")
        .unwrap()
        .set("token", "s3cret")
        .unwrap()
        .set("token_name", "ops")
        .unwrap();
    server.start().unwrap();
    assert_eq!(server.start().unwrap_err().code(), Some(114)); // EALREADY
    assert_eq!(server.set("port", "1").unwrap_err().code(), Some(16)); // EBUSY
    assert!(server.running());
    let port = server.port();
    assert_ne!(port, 0);
    assert_eq!(ctl.open_handles(), 4); // q, the member, the subscription, the server

    let (status, answer) = request(port, "GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.ends_with("ok") || answer.ends_with("ok\n"),
        "{answer}"
    );
    let (status, answer) = request(port, "GET /v1/members?group=q HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"name\":\"query-1\""), "{answer}");
    assert!(
        answer.contains(&format!("\"id\":{}", member.id())),
        "{answer}"
    );

    let kill = |auth: &str| {
        format!(
            "POST /v1/members/{}/kill HTTP/1.0\r\n{auth}Content-Length: 0\r\n\r\n",
            member.id()
        )
    };
    let (status, answer) = request(port, &kill("")).unwrap();
    assert_eq!(status, 401, "{answer}"); // no token
    let (status, answer) = request(port, &kill("Authorization: Bearer wrong\r\n")).unwrap();
    assert!(status == 401 || status == 403, "{answer}");
    assert!(reasons.lock().unwrap().is_empty());
    assert!(!member.killed());

    let (status, answer) = request(port, &kill("Authorization: Bearer s3cret\r\n")).unwrap();
    assert!(status == 200 || status == 202, "{answer}");
    assert_eq!(*reasons.lock().unwrap(), [CancelReason::Operator]);
    assert!(member.killed());
    // Idempotent: not killed twice.
    let (status, answer) = request(port, &kill("Authorization: Bearer s3cret\r\n")).unwrap();
    assert_eq!(status / 100, 2, "{answer}");
    assert_eq!(reasons.lock().unwrap().len(), 1);

    let e = actions
        .next(WAIT)
        .unwrap()
        .expect("the kill on the event stream");
    assert_eq!(e.kind, EventKind::Action);
    assert_eq!(e.group, "q"); // about the member's group
    assert!(e.payload.contains("/kill"), "{}", e.payload);

    // The audit names the token, never shows it.
    let (status, answer) = request(port, "GET /v1/audit HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains("ops") && !answer.contains("s3cret"),
        "{answer}"
    );

    server.stop();
    assert!(!server.running());
    assert_eq!(server.port(), 0);
    assert!(request(port, "GET /healthz HTTP/1.0\r\n\r\n").is_none());
    server.stop(); // does nothing when stopped
                   // Stopped, it takes options again and restarts: writes off now.
    server.set("allow_writes", "0").unwrap();
    server.start().unwrap();
    let (status, answer) =
        request(server.port(), &kill("Authorization: Bearer s3cret\r\n")).expect("serving again");
    assert_eq!(status, 405, "{answer}");
    drop(server); // stops it

    member.uncharge(MIB);
    drop((member, actions, q));
    assert_eq!(ctl.open_handles(), 0);
}

#[test]
fn a_server_keeps_its_controller_and_stops_on_drop() {
    let ctl = Controller::new().unwrap();
    let server = Server::new(&ctl).unwrap();
    server.start().unwrap();
    let port = server.port();
    assert_eq!(
        request(port, "GET /healthz HTTP/1.0\r\n\r\n").unwrap().0,
        200
    );
    drop(ctl); // the server keeps it
    assert_eq!(server.controller().open_handles(), 1);
    let (status, answer) = request(port, "GET /v1/groups HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(status, 200, "{answer}");
    // Dropped on another thread while running: it stops, bounded.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(server);
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("drop did not stop the server");
    assert!(request(port, "GET /healthz HTTP/1.0\r\n\r\n").is_none());
}

#[test]
fn null_handles_through_the_sys_crate() {
    use memcg_sys::*;
    use std::ptr::{null, null_mut};
    let mut out = null_mut();
    let mut message = [0u8; 8];
    // SAFETY: the C API checks every handle for NULL; this is what the safe crate never sends.
    unsafe {
        assert_eq!(memcg_server_create(null_mut(), &mut out), 22);
        assert!(out.is_null());
        assert_eq!(
            memcg_server_set(null_mut(), c"port".as_ptr(), c"0".as_ptr()),
            22
        );
        let buf = message.as_mut_ptr().cast();
        assert_eq!(memcg_server_start(null_mut(), buf, message.len()), 22);
        assert_eq!(memcg_server_port(null()), 0);
        assert_eq!(memcg_server_running(null()), 0);
        memcg_server_stop(null_mut());
        memcg_server_destroy(null_mut());
    }
}
