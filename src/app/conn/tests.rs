//! The connection's timer, the listener's options (no-delay, the deferred accept) and the accept
//! loop's order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::{no_delay_from, Armed, ConnSlot, ConnState, Ended, Gate};

/// A waker that counts its wakes.
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A config with `header_timeout` 2 s and `idle_timeout` 10 s, and a route to nowhere.
fn config() -> crate::config::Config {
    crate::config::Config::from_toml(
        "[server]\nheader_timeout = \"2s\"\nidle_timeout = \"10s\"\n\
         [[providers]]\nname = \"p\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         [[routes]]\nname = \"r\"\ntargets = [{ provider = \"p\", model = \"m\" }]\n",
        &|_| None,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A connection's state under [`config`].
fn state() -> ConnState {
    let config = config();
    let shared = crate::routing::Shared::new(crate::metrics::Registry::new(), 1 << 20);
    let gate = Gate::new(&config.server, shared);
    gate.connections.fetch_add(1, Ordering::AcqRel);
    ConnState::new(ConnSlot(gate))
}

/// A new connection's timer is set for its first head's deadline. Once that head has
/// arrived and been answered, the timer is set anew for the idle deadline: it does not
/// wake the connection at `header_timeout`, as a timer moved later would (tokio fires it
/// at the time it was set for first), and it still ends the connection at `idle_timeout`.
#[tokio::test(start_paused = true)]
async fn a_timer_set_for_a_head_does_not_wake_the_connection_once_the_head_came() {
    let state = state();
    let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    let mut armed = Armed::new(&state);
    assert!(armed.head, "a new connection owes a head");
    let mut timer = std::pin::pin!(tokio::time::sleep_until(armed.at));
    assert!(state
        .poll_due(timer.as_mut(), &mut armed, &mut cx)
        .is_pending());

    // A request's head arrives whole and its answer ends.
    tokio::time::advance(Duration::from_millis(100)).await;
    state.begin();
    state.end();
    assert!(state
        .poll_due(timer.as_mut(), &mut armed, &mut cx)
        .is_pending());
    assert!(!armed.head);

    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        0,
        "woken at the head's deadline"
    );
    tokio::time::advance(Duration::from_secs(7)).await;
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        1,
        "woken at the idle deadline"
    );
    assert!(matches!(
        state.poll_due(timer.as_mut(), &mut armed, &mut cx),
        Poll::Ready(Ended::IdleTimeout)
    ));
}

/// A listener of the gateway's own (`switchyard serve`'s), and its address.
fn gateway_listener() -> (std::net::SocketAddr, tokio::net::TcpListener) {
    let server = crate::app::Server::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let addr = server.local_addr();
    let listener = server.listeners.into_iter().next().unwrap();
    (addr, tokio::net::TcpListener::from_std(listener).unwrap())
}

/// A connection accepted on the gateway's own listeners has `TCP_NODELAY` (its small writes,
/// SSE events among them, leave at once) from the listener where the kernel copies it (Linux:
/// no system call a connection). On a listener bound without it, as a caller of
/// `app::serve` may bind one, its connections do not, and each sets its own.
#[tokio::test]
async fn a_connection_has_no_delay_from_the_gateway_s_listener() {
    let (addr, listener) = gateway_listener();
    assert_eq!(no_delay_from(&listener), cfg!(target_os = "linux"));
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A first byte: the listener hands a connection over once one has come (below).
    client.write_all(b"G").await.unwrap();
    let (accepted, _) = listener.accept().await.unwrap();
    assert!(!no_delay_from(&listener) || accepted.nodelay().unwrap());

    let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    assert!(!no_delay_from(&plain));
}

/// A connection that has sent nothing is not handed over by the gateway's listeners (on
/// Linux), so the server thread is not woken for it; once its first bytes come it is, with
/// them there to read. Kernel timing, on the real clock: the kernel hands a silent connection
/// over only after `DEFER_ACCEPT_SECS`, so one handed over sooner (as a listener without the
/// option does) fails the test.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_connection_is_handed_over_once_its_first_bytes_come() {
    use tokio::io::AsyncReadExt;
    let (addr, listener) = gateway_listener();

    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connected = std::time::Instant::now();
    let early = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
    let mut accepted = match early {
        Ok(accepted) => {
            // Only a test thread held up past the kernel's wait gets here. (The kernel's
            // second runs from its answer to the connect, a little before `connected`.)
            let wait = Duration::from_secs(super::DEFER_ACCEPT_SECS.into());
            assert!(
                connected.elapsed() >= wait - Duration::from_millis(100),
                "a connection that sent nothing was handed over at once"
            );
            client.write_all(b"GET").await.unwrap();
            accepted.unwrap().0
        }
        Err(_) => {
            client.write_all(b"GET").await.unwrap();
            let accepted = tokio::time::timeout(Duration::from_secs(10), listener.accept());
            accepted
                .await
                .expect("handed over once its bytes came")
                .unwrap()
                .0
        }
    };
    let mut read = [0; 3];
    accepted.read_exact(&mut read).await.unwrap();
    assert_eq!(&read, b"GET");
}

/// A connection taken from the listener runs before the listener is asked for the next: on the
/// gateway's listeners its request has come with it (`defer_accept`), and the loop's next turn
/// can wait. Two connections wait to be accepted; the turn of the accept loop that takes the
/// first does not take the second, and the next turn does.
#[tokio::test]
async fn an_accepted_connection_runs_before_the_next_is_taken() {
    let state = crate::app::build_state(config()).unwrap();
    let gate = crate::app::gate(&state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _first = std::net::TcpStream::connect(addr).unwrap();
    let _second = std::net::TcpStream::connect(addr).unwrap();
    let app = crate::api::App::new(state);
    let mut serving = Box::pin(super::serve_on(
        listener,
        app,
        std::future::pending(),
        gate.clone(),
    ));
    let accepted = || gate.connections.load(Ordering::Acquire);
    // Turns until the runtime has seen the listener ready.
    let took_first = async {
        while accepted() == 0 {
            turn(&mut serving).await;
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), took_first)
        .await
        .expect("the first connection accepted");
    assert_eq!(
        accepted(),
        1,
        "the turn that took the first took the second too"
    );
    turn(&mut serving).await;
    assert_eq!(accepted(), 2, "the next turn takes the second");
}

/// One turn of the accept loop: `serving` polled once, which must not end.
async fn turn<F: std::future::Future>(serving: &mut std::pin::Pin<Box<F>>) {
    std::future::poll_fn(|cx| {
        assert!(serving.as_mut().poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
}
