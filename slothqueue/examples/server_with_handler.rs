//! The HTTP server with a typed handler: `slothqueue serve`'s API and
//! drain worker inside a program, the worker running a `thumbnail` job
//! type of the program's. Another program enqueues such a job as JSON over
//! HTTP (here: this one, with a bare HTTP/1.1 request), long-polls it
//! until it is finished, and the server shuts down.
//!
//! ```sh
//! cargo run -p slothqueue --example server_with_handler
//! ```
//!
//! It listens on a free loopback port, keeps its queue and token in a
//! temporary folder (deleted at the end), and exits on its own.

#![allow(clippy::print_stdout, reason = "an example says what it does")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use slothqueue::http::{DrainWorker, ServeConfig, Token};
use slothqueue::typed::{Job, JobContext, JobError, Queue, RunnerEvent, Worker};
use tokio::sync::oneshot;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Makes a thumbnail's name and size (a stand-in for the real work).
#[derive(Debug, Serialize, Deserialize)]
struct Thumbnail {
    image: String,
    #[serde(default = "default_size")]
    size: u32,
}

fn default_size() -> u32 {
    128
}

impl Job for Thumbnail {
    const KIND: &'static str = "thumbnail";
    type Output = String;

    async fn run(self, ctx: JobContext) -> Result<String, JobError> {
        let stem = self.image.rsplit_once('.').map_or(self.image.as_str(), |(s, _)| s);
        Ok(format!(
            "{stem}-{0}x{0}.png (job #{1}, attempt {2})",
            self.size,
            ctx.id(),
            ctx.attempt()
        ))
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("queue.db");
    let queue = Queue::open(&db)?;

    // The drain worker: `serve`'s settings, with the typed handler.
    let runner = Worker::with_config(&queue, DrainWorker::config(&db))
        .handle::<Thumbnail>()
        .into_runner()?;
    let worker = DrainWorker::from_runner(runner, |e: RunnerEvent| println!("worker: {e}"));

    let mut config = ServeConfig::new(Token::Generate { beside_queue: db.clone() });
    config.addr = "127.0.0.1:0".parse()?;
    let bound = slothqueue::http::bind(queue.store().clone(), config).await?;
    let addr = bound.local_addr();
    let token = std::fs::read_to_string(bound.token_path())?.trim().to_owned();
    println!("listening on http://{addr}");
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(bound.run(Some(worker), async {
        let _ = stopped.await;
    }));

    // Another program's side: enqueue a thumbnail job as JSON, then wait.
    let body = r#"{"kind":"thumbnail","payload":{"image":"cat.jpg","size":64}}"#;
    let (status, answer) = request(addr, &token, "POST", "/api/tasks/enqueue", Some(body)).await?;
    println!("POST /api/tasks/enqueue -> {status} {answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer)?;
    let id = answer["job"]["id"].as_i64().ok_or("the enqueue answered no job id")?;
    let path = format!("/api/tasks/outbox/{id}?wait=30");
    let (status, answer) = request(addr, &token, "GET", &path, None).await?;
    let job: serde_json::Value = serde_json::from_str(&answer)?;
    println!("GET {path} -> {status}: state {}, result {}", job["state"], job["result"]);

    let _ = stop.send(());
    server.await??;
    println!("server stopped");
    // The same job read back through the typed API.
    println!("#{id} output: {:?}", queue.output::<Thumbnail>(id).await?);
    if job["state"] != "done" {
        return Err(format!("job #{id} did not finish done: {answer}").into());
    }
    Ok(())
}

/// One HTTP/1.1 request with the bearer token, its status and body back.
/// A real client would use an HTTP library; this keeps the example to the
/// crate's own dependencies.
async fn request(
    addr: SocketAddr,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), Error> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n"
    );
    if let Some(body) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    let message = format!("{head}\r\n{}", body.unwrap_or(""));
    let raw = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        stream.write_all(message.as_bytes())?;
        let mut raw = String::new();
        stream.read_to_string(&mut raw)?;
        Ok(raw)
    })
    .await??;
    let (head, body) = raw.split_once("\r\n\r\n").ok_or("no HTTP response")?;
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return Err("a chunked answer; this little client reads only whole ones".into());
    }
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    Ok((status.ok_or("no HTTP status")?, body.to_owned()))
}
