//! Section 1: the config-api of scripts/up against nginx serving its answer's identical
//! bytes as a static file, browser-like requests with the same headers, under loadgen then
//! wrk; with the peers, Unleash Edge offline with the same experiments (its client API and
//! its frontend API).

use anyhow::Context;

use super::context::{Run, log};
use super::measure::{Measure, Stderr, Stdout, strings};
use super::nginx::Static;
use super::plan::{self, Tool};
use super::services::{Ready, Start};

const CONFIG_API: &str = "http://127.0.0.1:8082/api/v1/experiments";

/// What a browser sends with the client library's cross-origin fetch, as `-H` arguments.
fn browser(key: &str) -> Vec<String> {
    let headers = [
        format!("X-public-key: {key}"),
        "Accept: application/json".to_owned(),
        "Origin: https://shop.example".to_owned(),
        "Referer: https://shop.example/products/espresso-beans".to_owned(),
        "User-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, \
         like Gecko) Chrome/142.0.0.0 Safari/537.36"
            .to_owned(),
        "Accept-Language: en-US,en;q=0.9".to_owned(),
        "Sec-Fetch-Mode: cors".to_owned(),
        "Sec-Fetch-Site: cross-site".to_owned(),
    ];
    headers
        .into_iter()
        .flat_map(|h| ["-H".to_owned(), h])
        .collect()
}

/// `--watch` arguments.
fn watching(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .flat_map(|w| ["--watch".to_owned(), w.clone()])
        .collect()
}

/// A subject: its URL, its own headers and the processes watched with it.
struct Subject {
    url: String,
    headers: Vec<String>,
    watch: Vec<String>,
}

/// GET of a URL with the config-api's key, its body.
async fn get(url: &str, key: &str) -> anyhow::Result<bytes::Bytes> {
    let answer = reqwest::Client::new()
        .get(url)
        .header("X-public-key", key)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?
        .error_for_status()?;
    Ok(answer.bytes().await?)
}

pub async fn section(run: &Run<'_>, nginx: &Static) -> anyhow::Result<()> {
    let s = run.settings;
    log(&format!(
        "1. config-api vs nginx static file ({} rounds of {}s, {} connections; loadgen, then wrk)",
        s.rounds, s.seconds, s.connections
    ));
    let file = nginx.www().join("api/v1/experiments");
    std::fs::write(&file, get(CONFIG_API, &run.key).await?)?;
    let served = reqwest::get(format!(
        "http://127.0.0.1:{}/api/v1/experiments",
        nginx.port
    ))
    .await?
    .error_for_status()?
    .bytes()
    .await?;
    anyhow::ensure!(
        served == get(CONFIG_API, &run.key).await?,
        "nginx does not serve the bytes the config-api serves"
    );
    let browser = browser(&run.key);
    let mut edge = None;
    if s.peers().is_some() {
        edge = Some(start_edge(run, &file).await?);
    }
    let subject = |name: &str| -> Subject {
        match name {
            "config-api" => Subject {
                url: CONFIG_API.to_owned(),
                headers: Vec::new(),
                watch: Vec::new(),
            },
            "nginx-static" => Subject {
                url: format!("http://127.0.0.1:{}/api/v1/experiments", nginx.port),
                headers: Vec::new(),
                watch: nginx.workers.clone(),
            },
            _ => {
                let (pid, url, token) = match (&edge, name) {
                    (Some(e), "unleash-edge-client") => (e.pid, e.client_url(), "bench-client"),
                    (Some(e), _) => (e.pid, e.frontend_url(), "bench-frontend"),
                    (None, _) => unreachable!("the peers' subjects come with the peers"),
                };
                Subject {
                    url,
                    headers: strings(&["-H", &format!("Authorization: *:development.{token}")]),
                    watch: vec![format!("unleash-edge={pid}")],
                }
            }
        }
    };
    let connections = s.connections.to_string();
    let seconds = s.seconds.to_string();
    for (tool, name) in plan::config_api(s.rounds, s.peers().is_some()) {
        let subject = subject(name);
        let measure = match tool {
            Tool::Loadgen => {
                let mut args = strings(&["get", "--bench", "config-api", "--subject", name]);
                args.extend(strings(&[
                    "--connections",
                    &connections,
                    "--duration",
                    &seconds,
                    "--warmup",
                    "2",
                ]));
                args.extend(browser.iter().cloned());
                args.extend(watching(&subject.watch));
                args.extend(subject.headers);
                args.extend(["--url".to_owned(), subject.url]);
                Measure::loadgen(args)
            }
            Tool::Wrk => {
                let mut own = strings(&["--bench", "config-api-wrk", "--subject", name]);
                own.extend(watching(&subject.watch));
                let mut wrk = strings(&["-t", "2", "-c", &connections]);
                wrk.extend(browser.iter().cloned());
                wrk.extend(subject.headers);
                wrk.push(subject.url);
                Measure::wrk(own, wrk)
            }
        };
        run.bench.measure_kept(&measure).await?;
    }
    if let Some(edge) = edge {
        run.services.stop(edge.pid).await?;
    }
    Ok(())
}

/// Unleash Edge, offline, serving the same experiments as Unleash features.
struct Edge {
    pid: u32,
    url: String,
}

impl Edge {
    /// Its client API: the features, for SDKs that evaluate them (the config-api's role).
    fn client_url(&self) -> String {
        format!("{}/api/client/features", self.url)
    }

    /// Its frontend API: the browser's, evaluated for the context in the query.
    fn frontend_url(&self) -> String {
        format!(
            "{}/api/frontend?sessionId=bench-session-1&appName=shop",
            self.url
        )
    }
}

async fn start_edge(run: &Run<'_>, answer: &std::path::Path) -> anyhow::Result<Edge> {
    let features = run.out.join("unleash-features.json");
    run.bench
        .tool(
            &strings(&["unleash-features", &answer.display().to_string()]),
            Stdout::Create(&features),
            Stderr::Inherit,
        )
        .await?;
    let port = crate::supervise::free_port_from(3063);
    let url = format!("http://127.0.0.1:{port}");
    let binary = run
        .settings
        .peers()
        .and_then(|p| p.unleash_edge.clone())
        .context("no BENCH_UNLEASH_EDGE")?;
    let pid = run
        .services
        .start(Start {
            name: "unleash-edge",
            ready: Ready::Http(format!("{url}/internal-backstage/health")),
            command: vec![
                binary.display().to_string(),
                "--interface".into(),
                "127.0.0.1".into(),
                "--port".into(),
                port.to_string(),
                "offline".into(),
                "--bootstrap-file".into(),
                features.display().to_string(),
                "--client-tokens".into(),
                "*:development.bench-client".into(),
                "--frontend-tokens".into(),
                "*:development.bench-frontend".into(),
            ],
            env: Vec::new(),
            unset: Vec::new(),
        })
        .await?;
    let edge = Edge { pid, url };
    let served = reqwest::Client::new()
        .get(edge.client_url())
        .header("Authorization", "*:development.bench-client")
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let count = |text: &str| text.matches("\"strategies\"").count();
    let features = count(&served);
    anyhow::ensure!(
        features == count(&std::fs::read_to_string(features_path(run))?),
        "Unleash Edge does not serve the experiments as features ({features})"
    );
    Ok(edge)
}

fn features_path(run: &Run<'_>) -> std::path::PathBuf {
    run.out.join("unleash-features.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_browser_s_headers() {
        let headers = browser("pk_demo_coffee");
        assert_eq!(headers.len(), 16);
        assert_eq!(headers[..2], ["-H", "X-public-key: pk_demo_coffee"]);
        assert!(headers[9].ends_with("Chrome/142.0.0.0 Safari/537.36"));
        assert_eq!(headers[15], "Sec-Fetch-Site: cross-site");
    }
}
