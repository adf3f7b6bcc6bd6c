//! A listener whose connections a handler can mark "closed by the server", as
//! llama-cpp-python does after answering a context overflow with an empty stream:
//! the response advertises keep-alive, but the server has closed the socket.
//!
//! Why deterministic: a real server's close races the client's next request; when
//! the FIN arrives first the client's pool notices and dials anew, and the bug stays
//! hidden. Here the connection is closed exactly when the next request arrives on it
//! (its bytes are dropped and the server hangs up without a response byte), which
//! is the losing side of that race every time.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Accepts TCP connections (with `TCP_NODELAY`, as the real services) that can be
/// closed by the server through their [`CloseHandle`].
pub struct ClosingListener(pub TcpListener);

/// A connection; once its handle is closed, the next request on it is never read.
pub struct ClosingConn {
    tcp: TcpStream,
    closed: Arc<AtomicBool>,
}

/// The handle of the connection a request came on (an axum `ConnectInfo`).
#[derive(Clone, Debug)]
pub struct CloseHandle(Arc<AtomicBool>);

impl CloseHandle {
    /// The server closes this connection once the current response is sent.
    pub fn close_after_response(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl axum::serve::Listener for ClosingListener {
    type Io = ClosingConn;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Ok((tcp, addr)) = self.0.accept().await {
                let _ = tcp.set_nodelay(true);
                let conn = ClosingConn {
                    tcp,
                    closed: Arc::new(AtomicBool::new(false)),
                };
                return (conn, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

impl Connected<IncomingStream<'_, ClosingListener>> for CloseHandle {
    fn connect_info(stream: IncomingStream<'_, ClosingListener>) -> Self {
        CloseHandle(stream.io().closed.clone())
    }
}

impl AsyncRead for ClosingConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if self.closed.load(Ordering::SeqCst) && buf.filled().len() > before {
            // The next request: the server is gone. End of stream, so the HTTP
            // server hangs up without answering.
            buf.set_filled(before);
            return Poll::Ready(Ok(()));
        }
        polled
    }
}

impl AsyncWrite for ClosingConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
