//! libpq's URL query parameters as libpq reads them. tokio-postgres takes
//! `host` and `port` in the query too, but adds them to the URL's own
//! (`postgres://u@h/db?port=5433` becomes one host with two ports, refused
//! at connect as "invalid configuration"), where libpq lets the query's
//! override them. So the URL is rewritten first: a query `port` is moved
//! onto each host of the URL, a query `host` replaces the URL's hosts.

/// The URL with its query's `host` and `port` (the last of each, as libpq
/// keeps) folded into its hosts; any other URL unchanged.
pub(crate) fn fold_host_and_port(url: &str) -> Result<String, String> {
    let Some((scheme, rest)) = url.split_once("://") else { return Ok(url.to_owned()) };
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, q),
        None => return Ok(url.to_owned()),
    };
    let (authority, path) = match before_query.find('/') {
        Some(i) => before_query.split_at(i),
        None => (before_query, ""),
    };
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(i) => (&authority[..=i], &authority[i + 1..]),
        None => ("", authority),
    };
    let (mut query_host, mut query_port) = (None, None);
    let mut kept: Vec<String> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("host", v)) => query_host = Some(v),
            Some(("port", v)) => query_port = Some(v),
            _ => kept.push(pair.to_owned()),
        }
    }
    if (query_host.is_none() && query_port.is_none()) || hosts.is_empty() {
        // Nothing to fold, or nothing in the URL to fold into: tokio-postgres
        // reads the query's alone as libpq does.
        return Ok(url.to_owned());
    }
    let chunks: Vec<(&str, Option<&str>)> = hosts.split(',').map(split_port).collect();
    let hosts = match (query_host, query_port) {
        (Some(host), port) => {
            // The query's hosts replace the URL's; their port is the
            // query's, else the URL's one port if it names one.
            let mut ports: Vec<&str> = chunks.iter().filter_map(|(_, p)| *p).collect();
            ports.dedup();
            if let Some(p) = port.or(if ports.len() == 1 { Some(ports[0]) } else { None }) {
                kept.push(format!("port={p}"));
            }
            kept.push(format!("host={host}"));
            String::new()
        }
        (None, Some(port)) => {
            let ports: Vec<&str> = port.split(',').collect();
            if ports.len() != 1 && ports.len() != chunks.len() {
                return Err(format!(
                    "`port={port}` names {} ports for the URL's {} hosts (give one port, or one per host)",
                    ports.len(),
                    chunks.len()
                ));
            }
            let joined: Vec<String> = chunks
                .iter()
                .enumerate()
                .map(|(i, (h, _))| format!("{h}:{}", ports.get(i).unwrap_or(&ports[0])))
                .collect();
            joined.join(",")
        }
        (None, None) => unreachable!("returned above"),
    };
    let query = kept.join("&");
    let separator = if query.is_empty() { "" } else { "?" };
    Ok(format!("{scheme}://{userinfo}{hosts}{path}{separator}{query}"))
}

/// `host:port` (or `[v6]:port`) as the host and its port, if it names one.
fn split_port(chunk: &str) -> (&str, Option<&str>) {
    if chunk.starts_with('[') {
        return match chunk.find("]:") {
            Some(i) => (&chunk[..=i], Some(&chunk[i + 2..])),
            None => (chunk, None),
        };
    }
    match chunk.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (chunk, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::parse_url;
    use tokio_postgres::config::Host;

    fn hosts_and_ports(url: &str) -> (Vec<String>, Vec<u16>) {
        let target = parse_url(url).unwrap();
        let hosts = target
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(name) => name.clone(),
                Host::Unix(dir) => dir.display().to_string(),
            })
            .collect();
        (hosts, target.config.get_ports().to_vec())
    }

    #[test]
    fn a_query_port_overrides_the_urls_as_libpq_reads_it() {
        assert_eq!(
            hosts_and_ports("postgres://u@db/postgres?port=5433"),
            (vec!["db".to_owned()], vec![5433])
        );
        assert_eq!(
            hosts_and_ports("postgres://u@db:5432/postgres?sslmode=disable&port=5433&schema=q"),
            (vec!["db".to_owned()], vec![5433])
        );
        assert_eq!(
            hosts_and_ports("postgres://u@a,b:6000/d?port=5433"),
            (vec!["a".to_owned(), "b".to_owned()], vec![5433, 5433])
        );
        assert_eq!(
            hosts_and_ports("postgres://u@[::1]/d?port=5433"),
            (vec!["::1".to_owned()], vec![5433])
        );
        assert_eq!(parse_url("postgres://u@db/d?port=5433").unwrap().server, "db:5433");
    }

    #[test]
    fn a_query_host_replaces_the_urls() {
        assert_eq!(
            hosts_and_ports("postgres://u@db/d?host=/run/postgresql&port=5433"),
            (vec!["/run/postgresql".to_owned()], vec![5433])
        );
        assert_eq!(
            hosts_and_ports("postgres://u@db:6000/d?host=other"),
            (vec!["other".to_owned()], vec![6000])
        );
        // Without a host in the URL, tokio-postgres already reads them alone.
        assert_eq!(
            hosts_and_ports("postgres:///d?host=/run/postgresql&port=5433"),
            (vec!["/run/postgresql".to_owned()], vec![5433])
        );
    }

    #[test]
    fn ports_that_do_not_fit_the_hosts_are_refused_with_a_hint() {
        let e = parse_url("postgres://u@a,b,c/d?port=1,2").unwrap_err().to_string();
        assert!(e.contains("names 2 ports for the URL's 3 hosts"), "{e}");
        let e = parse_url("postgres://u@db/d?port=x").unwrap_err().to_string();
        assert!(e.contains("postgres://USER@HOST/DB"), "{e}");
        // What tokio-postgres refuses only at connect, with no more than
        // "invalid configuration".
        let e = parse_url("postgres://u@h/d?hostaddr=127.0.0.1,127.0.0.2").unwrap_err().to_string();
        assert!(e.contains("1 hosts but 2 `hostaddr`s"), "{e}");
        let e = parse_url("postgres:///d").unwrap_err().to_string();
        assert!(e.contains("it names no server"), "{e}");
        assert!(parse_url("postgres:///d?hostaddr=127.0.0.1").is_ok());
    }

    /// `?pooler=transaction` (PgBouncer's transaction mode): no startup
    /// options, the settings `SET LOCAL` in every transaction instead,
    /// and the queue's name says it; anything else is refused with the
    /// value to give.
    #[test]
    fn a_pooler_in_transaction_mode_sends_no_session_settings() {
        use crate::txn::{PgOptions, connection_config};
        let pooled = parse_url("postgres://u@h/d?pooler=transaction&schema=q").unwrap();
        assert!(pooled.pooler);
        assert_eq!(pooled.name, "postgres://u@h:5432/d?pooler=transaction&schema=q");
        let session = connection_config(&pooled, &PgOptions::default(), true);
        assert_eq!(session.config.get_options(), None);
        let set = session.per_transaction.unwrap();
        assert!(
            set.starts_with("SET LOCAL search_path TO q; SET LOCAL lock_timeout = 5000"),
            "{set}"
        );
        assert!(set.ends_with("SET LOCAL transaction_read_only = on"), "{set}");
        let direct = parse_url("postgres://u@h/d?schema=q").unwrap();
        assert!(!direct.pooler);
        let session = connection_config(&direct, &PgOptions::default(), false);
        assert!(session.per_transaction.is_none());
        assert!(session.config.get_options().unwrap().contains("-c search_path=q"));
        let e = parse_url("postgres://u@h/d?pooler=statement").unwrap_err().to_string();
        assert!(e.contains("give `pooler=transaction`"), "{e}");
    }

    #[test]
    fn a_url_without_host_or_port_in_its_query_is_left_alone() {
        let url = "postgres://u:p%40ss@db:5432/d?sslmode=disable";
        assert_eq!(fold_host_and_port(url).unwrap(), url);
    }
}
