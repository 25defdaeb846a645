//! The release bundle, `install.sh` and the service files, end to end on 127.0.0.1.
//!
//! On Linux x86-64, `packaging/build-bundle.sh linux-x86_64-cpu --binary <this test's
//! sys1rust>` packs the binary cargo built for the tests (its RUNPATH rewritten by patchelf to
//! the bundle's `$ORIGIN/../lib/mlx/lib`), so the suite does not compile sys1rust a second time.
//! A small HTTP server here publishes it the way GitHub releases do: `download/v<version>/`
//! and a `latest/download/` redirect. `install.sh` then runs under `dash` with a temporary
//! HOME, a stand-in `systemctl` (or `launchctl` and `uname` for the macOS path) that logs its
//! calls, and a PATH without `~/.local/bin`.
//!
//! Needs `patchelf`, `shellcheck` and `systemd-analyze` (Debian: `apt-get install patchelf
//! shellcheck systemd`); the plist check uses `plutil`, else `xmllint`, else python3.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// A fresh scratch directory under cargo's per-target temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("install-test")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn need(tool: &str, package: &str) {
    assert!(
        have(tool),
        "{tool} is needed by this test: install it (Debian: apt-get install {package})"
    );
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn check(output: Output, what: &str) -> Output {
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}

fn write_script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The service files `install.sh` renders for this HOME.
fn rendered_service(home: &Path, kind: &str) -> String {
    let out = Command::new("sh")
        .arg(repo().join("install.sh"))
        .args(["--print-service", kind])
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("sh runs");
    text(&check(out, "install.sh --print-service").stdout)
}

/// Both service files come from install.sh's one `render_service`; each passes its platform's
/// checker: `systemd-analyze verify` (a warning fails too) and `plutil -lint`, or at least an
/// XML parser.
#[test]
fn service_files_are_valid() {
    let dir = scratch("service");
    let home = dir.join("home");
    let program = home.join(".local/bin/sys1rust");
    std::fs::create_dir_all(program.parent().unwrap()).unwrap();
    write_script(&program, "exit 0"); // systemd-analyze checks that ExecStart exists
    let env_file = home.join(".config/sys1rust/env");

    let unit = rendered_service(&home, "systemd");
    for line in [
        format!("ExecStart={} serve", program.display()),
        format!("EnvironmentFile=-{}", env_file.display()),
        "Restart=on-failure".into(),
        "WantedBy=default.target".into(),
    ] {
        assert!(
            unit.lines().any(|l| l == line),
            "the unit lacks {line:?}:\n{unit}"
        );
    }
    assert!(
        !unit.contains("StandardOutput"),
        "the unit logs to the journal, systemd's default"
    );
    // systemd reads the network ordering and the start limit from [Unit] only (the start
    // limit's [Service] spelling is a deprecated one).
    let unit_section: Vec<&str> = unit
        .lines()
        .skip_while(|l| *l != "[Unit]")
        .take_while(|l| *l != "[Service]")
        .collect();
    for line in [
        "Wants=network-online.target",
        "After=network-online.target",
        "StartLimitIntervalSec=300",
        "StartLimitBurst=10",
    ] {
        assert!(
            unit_section.contains(&line),
            "[Unit] lacks {line:?}:\n{unit}"
        );
    }
    assert!(
        unit.lines().any(|l| l == "RestartSec=10"),
        "restarts are not paced:\n{unit}"
    );
    let plist = rendered_service(&home, "launchd");
    for needle in [
        "<key>KeepAlive</key>".to_owned(),
        format!("<string>{}</string>", program.display()),
        format!("<string>{}</string>", env_file.display()),
        format!(
            "<string>{}</string>",
            home.join("Library/Logs/sys1rust.log").display()
        ),
        "exec \"$0\" serve</string>".into(),
    ] {
        assert!(
            plist.contains(&needle),
            "the plist lacks {needle:?}:\n{plist}"
        );
    }

    if cfg!(target_os = "linux") {
        need("systemd-analyze", "systemd");
        let unit_path = home.join(".config/systemd/user/sys1rust.service");
        std::fs::create_dir_all(unit_path.parent().unwrap()).unwrap();
        std::fs::write(&unit_path, &unit).unwrap();
        let runtime = dir.join("runtime");
        std::fs::create_dir_all(&runtime).unwrap();
        let out = Command::new("systemd-analyze")
            .args(["--user", "verify"])
            .arg(&unit_path)
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", &runtime)
            .output()
            .expect("systemd-analyze runs");
        let out = check(out, "systemd-analyze verify");
        assert!(
            out.stderr.is_empty() && out.stdout.is_empty(),
            "systemd-analyze verify: {}",
            text(&out.stderr)
        );
    }

    let plist_path = dir.join("io.github.sys1rust.plist");
    std::fs::write(&plist_path, &plist).unwrap();
    let (tool, mut cmd) = if have("plutil") {
        ("plutil -lint", Command::new("plutil"))
    } else if have("xmllint") {
        ("xmllint", Command::new("xmllint"))
    } else {
        need("python3", "python3");
        ("python3 xml.dom.minidom", Command::new("python3"))
    };
    match tool {
        "plutil -lint" => cmd.arg("-lint"),
        "xmllint" => cmd.arg("--noout"),
        _ => cmd.args([
            "-c",
            "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])",
        ]),
    };
    check(
        cmd.arg(&plist_path).output().expect("the checker runs"),
        tool,
    );
}

/// `--help` is a heredoc, so it also works when the script is read from stdin, as in
/// `curl ... | sh -s -- --help`, where there is no file to read comments from.
#[test]
fn help_works_from_stdin() {
    let script = repo().join("install.sh");
    let from_file = check(
        Command::new("sh")
            .arg(&script)
            .arg("--help")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .output()
            .expect("sh runs"),
        "sh install.sh --help",
    );
    let help = text(&from_file.stdout);
    for needle in [
        "--version X",
        "--service",
        "--uninstall",
        "--purge",
        "--print-service systemd|launchd",
        "SYS1_BASE_URL",
        "LAYA_API_KEY",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let mut shells = vec!["sh"];
    if have("dash") {
        shells.push("dash");
    }
    for shell in shells {
        let out = check(
            Command::new(shell)
                .args(["-s", "--", "--help"])
                .stdin(std::fs::File::open(&script).expect("install.sh"))
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .output()
                .expect("the shell runs"),
            &format!("{shell} -s -- --help < install.sh"),
        );
        assert_eq!(text(&out.stdout), help, "{shell} -s -- --help < install.sh");
    }
}

#[test]
fn scripts_pass_shellcheck() {
    if !cfg!(target_os = "linux") && !have("shellcheck") {
        eprintln!("skipped: shellcheck is not installed");
        return;
    }
    need("shellcheck", "shellcheck");
    let root = repo();
    check(
        Command::new("shellcheck")
            .args(["-s", "sh"])
            .arg(root.join("install.sh"))
            .output()
            .unwrap(),
        "shellcheck -s sh install.sh",
    );
    check(
        Command::new("shellcheck")
            .arg(root.join("packaging/build-bundle.sh"))
            .output()
            .unwrap(),
        "shellcheck packaging/build-bundle.sh",
    );
    if have("dash") {
        check(
            Command::new("dash")
                .arg("-n")
                .arg(root.join("install.sh"))
                .output()
                .unwrap(),
            "dash -n install.sh",
        );
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod linux {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::OnceLock;

    const PLATFORM: &str = "linux-x86_64-cpu";
    const VERSION: &str = env!("CARGO_PKG_VERSION");

    /// The bundle, and the releases made from it, published on 127.0.0.1.
    struct Releases {
        /// dist/ as build-bundle.sh left it.
        dist: PathBuf,
        base_url: String,
    }

    /// The release `latest/download/` redirects to.
    const LATEST: &str = "9.0.1";

    fn releases() -> &'static Releases {
        static RELEASES: OnceLock<Releases> = OnceLock::new();
        RELEASES.get_or_init(make_releases)
    }

    fn sha256sums(dir: &Path) {
        let out = Command::new("sh")
            .current_dir(dir)
            .args(["-c", "sha256sum sys1rust-*.tar.gz > SHA256SUMS"])
            .output()
            .unwrap();
        check(out, "sha256sum");
    }

    /// Repacks the bundle as `sys1rust-<version>-<platform>.tar.gz` in `to`: a stand-in for
    /// another release (its binary still says the build's version).
    fn relabel(tarball: &Path, work: &Path, version: &str, platform: &str, to: &Path) {
        let _ = std::fs::remove_dir_all(work);
        std::fs::create_dir_all(work).unwrap();
        std::fs::create_dir_all(to).unwrap();
        check(
            Command::new("tar")
                .arg("-xzf")
                .arg(tarball)
                .arg("-C")
                .arg(work)
                .output()
                .unwrap(),
            "tar -x",
        );
        let name = format!("sys1rust-{version}-{platform}");
        std::fs::rename(
            work.join(format!("sys1rust-{VERSION}-{PLATFORM}")),
            work.join(&name),
        )
        .unwrap();
        std::fs::write(work.join(&name).join("VERSION"), format!("{version}\n")).unwrap();
        let out = Command::new("tar")
            .arg("-C")
            .arg(work)
            .arg("-czf")
            .arg(to.join(format!("{name}.tar.gz")))
            .arg(&name)
            .output()
            .unwrap();
        check(out, "tar -c");
    }

    fn make_releases() -> Releases {
        need("patchelf", "patchelf");
        let dir = scratch("releases");
        let dist = dir.join("dist");
        let out = Command::new("bash")
            .arg(repo().join("packaging/build-bundle.sh"))
            .args([
                PLATFORM,
                "--binary",
                env!("CARGO_BIN_EXE_sys1rust"),
                "--out",
            ])
            .arg(&dist)
            .output()
            .expect("bash runs");
        let out = check(out, "packaging/build-bundle.sh");
        let tarball = dist.join(format!("sys1rust-{VERSION}-{PLATFORM}.tar.gz"));
        assert_eq!(text(&out.stdout).trim(), tarball.display().to_string());

        let root = dir.join("www");
        let download = root.join("download");
        // This build, as build-bundle.sh made it.
        let v0 = download.join(format!("v{VERSION}"));
        std::fs::create_dir_all(&v0).unwrap();
        std::fs::copy(&tarball, v0.join(tarball.file_name().unwrap())).unwrap();
        std::fs::copy(dist.join("SHA256SUMS"), v0.join("SHA256SUMS")).unwrap();
        // A newer release, for updates; it has a "macOS" bundle too, for the LaunchAgent path.
        let v1 = download.join("v9.0.1");
        relabel(&tarball, &dir.join("work"), "9.0.1", PLATFORM, &v1);
        relabel(&tarball, &dir.join("work"), "9.0.1", "macos-arm64", &v1);
        sha256sums(&v1);
        // A release whose tarball was changed after SHA256SUMS was written.
        let v2 = download.join("v9.0.2");
        relabel(&tarball, &dir.join("work"), "9.0.2", PLATFORM, &v2);
        sha256sums(&v2);
        let bad = v2.join(format!("sys1rust-9.0.2-{PLATFORM}.tar.gz"));
        let mut bytes = std::fs::read(&bad).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x55;
        std::fs::write(&bad, bytes).unwrap();
        let _ = std::fs::remove_dir_all(dir.join("work"));

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let root = root.clone();
                std::thread::spawn(move || serve_file(stream, &root));
            }
        });
        Releases { dist, base_url }
    }

    /// One request of a static server with GitHub's `latest/download/` redirect.
    fn serve_file(mut stream: TcpStream, root: &Path) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut request = String::new();
        if reader.read_line(&mut request).is_err() {
            return;
        }
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                break;
            }
        }
        let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let head = |status: &str, extra: &str, len: usize| {
            format!(
                "HTTP/1.1 {status}\r\n{extra}content-length: {len}\r\nconnection: close\r\n\r\n"
            )
        };
        let response = if let Some(file) = path.strip_prefix("/latest/download/") {
            let to = format!("/download/v{LATEST}/{file}");
            head("302 Found", &format!("location: {to}\r\n"), 0).into_bytes()
        } else {
            match (
                path.contains(".."),
                std::fs::read(root.join(path.trim_start_matches('/'))),
            ) {
                (false, Ok(body)) => [head("200 OK", "", body.len()).into_bytes(), body].concat(),
                _ => head("404 Not Found", "", 0).into_bytes(),
            }
        };
        let _ = stream.write_all(&response);
    }

    /// A temporary HOME, with stand-ins for the service managers and PATHs to run install.sh.
    struct Home {
        dir: PathBuf,
        home: PathBuf,
        fakes: PathBuf,
        tmp: PathBuf,
    }

    impl Home {
        fn new(name: &str) -> Home {
            let dir = scratch(name);
            let (home, fakes, tmp) = (dir.join("home"), dir.join("fakes"), dir.join("tmp"));
            for d in [&home, &fakes, &tmp] {
                std::fs::create_dir_all(d).unwrap();
            }
            // systemctl and launchctl log their arguments and succeed.
            for tool in ["systemctl", "launchctl"] {
                write_script(
                    &fakes.join(tool),
                    &format!("echo \"$*\" >> {}/{tool}.log", dir.display()),
                );
            }
            Home {
                dir,
                home,
                fakes,
                tmp,
            }
        }

        fn log(&self, tool: &str) -> Vec<String> {
            std::fs::read_to_string(self.dir.join(format!("{tool}.log")))
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect()
        }

        fn clear_log(&self, tool: &str) {
            let _ = std::fs::remove_file(self.dir.join(format!("{tool}.log")));
        }

        /// Runs install.sh under dash (or sh) with a clean environment and SYS1_VARIANT=cpu;
        /// PATH is the fakes, then `path` (default: the system directories).
        fn install(&self, args: &[&str], path: Option<&str>) -> Output {
            self.install_with(args, path, Some("cpu"))
        }

        fn install_with(&self, args: &[&str], path: Option<&str>, variant: Option<&str>) -> Output {
            let shell = if have("dash") { "dash" } else { "sh" };
            let search = format!("{}:{}", self.fakes.display(), path.unwrap_or(SYSTEM_PATH));
            let mut cmd = Command::new(shell);
            if let Some(v) = variant {
                cmd.env("SYS1_VARIANT", v);
            }
            cmd.arg(repo().join("install.sh"))
                .args(args)
                .env_clear()
                .env("HOME", &self.home)
                .env("PATH", search)
                .env("TMPDIR", &self.tmp)
                .env("SHELL", "/bin/bash")
                .env("SYS1_BASE_URL", &releases().base_url)
                .output()
                .expect("the shell runs")
        }

        fn data(&self) -> PathBuf {
            self.home.join(".local/share/sys1rust")
        }

        fn link(&self) -> PathBuf {
            self.home.join(".local/bin/sys1rust")
        }

        fn env_file(&self) -> PathBuf {
            self.home.join(".config/sys1rust/env")
        }

        /// Writes the service's options file before install.sh would write its template.
        fn write_env(&self, body: &str) {
            let env = self.env_file();
            std::fs::create_dir_all(env.parent().unwrap()).unwrap();
            std::fs::write(env, body).unwrap();
        }

        /// An options file whose service serves the tiny fixture checkpoint, so that the
        /// `sys1rust pull` of `--service` needs no network.
        fn serve_fixture(&self) -> PathBuf {
            let model = crate::support::checkpoint("tiny");
            self.write_env(&format!("SYS1_MODEL=\"{}\"\n", model.display()));
            model
        }

        /// The names in ~/.local/share/sys1rust.
        fn installed(&self) -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(self.data())
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        }

        /// Every file or link under HOME (directories aside), relative to it.
        fn files(&self) -> Vec<String> {
            fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
                for entry in std::fs::read_dir(dir).unwrap().flatten() {
                    let path = entry.path();
                    if entry.file_type().unwrap().is_dir() {
                        walk(&path, base, out);
                    } else {
                        out.push(path.strip_prefix(base).unwrap().display().to_string());
                    }
                }
            }
            let mut out = Vec::new();
            walk(&self.home, &self.home, &mut out);
            out.sort();
            out
        }
    }

    const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

    /// Puts directory `dir` before the system directories.
    fn before_system(dir: &Path) -> String {
        format!("{}:{SYSTEM_PATH}", dir.display())
    }

    /// A PATH directory with every system tool except curl, so that install.sh uses wget.
    fn path_without_curl(dir: &Path) -> PathBuf {
        let farm = dir.join("no-curl");
        std::fs::create_dir_all(&farm).unwrap();
        for sys in SYSTEM_PATH.split(':') {
            for entry in std::fs::read_dir(sys).into_iter().flatten().flatten() {
                let name = entry.file_name();
                if name != "curl" && !farm.join(&name).exists() {
                    let _ = std::os::unix::fs::symlink(entry.path(), farm.join(&name));
                }
            }
        }
        farm
    }

    /// Serves the tiny fixture with `bin` (HOME `home`) and checks `/health`, and that the
    /// process mapped libmlx from `lib_dir`, not from the build's wheel.
    fn serve_tiny(bin: &Path, home: &Path, lib_dir: &Path) {
        let model = crate::support::checkpoint("tiny");
        let mut child = Command::new(bin)
            .args(["serve", "--port", "0", "--model"])
            .arg(&model)
            .env_clear() // also drops cargo's LD_LIBRARY_PATH, which names the wheel
            .env("HOME", home)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HF_HUB_OFFLINE", "1")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the bundled sys1rust starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split("\"address\":\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!("no ready line from {}: {line:?}", bin.display())
            })
            .to_owned();
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
        let mut stream = TcpStream::connect(&addr).unwrap();
        crate::support::write_request(&mut stream, "GET", "/health", &[], None);
        let health = crate::support::read_response(&mut stream);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(health.status, 200, "{}", health.text());
        assert!(
            health.text().contains("\"status\":\"ok\""),
            "{}",
            health.text()
        );
        let libmlx: Vec<&str> = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .filter(|p| p.ends_with("/libmlx.so"))
            .collect();
        let want = lib_dir.canonicalize().unwrap().join("libmlx.so");
        assert!(
            !libmlx.is_empty() && libmlx.iter().all(|p| Path::new(p) == want),
            "libmlx mapped from {libmlx:?}, not {}",
            want.display()
        );
    }

    /// The smoke test: the bundle, unpacked anywhere, serves a model with its own libmlx.
    #[test]
    fn bundle_runs_from_anywhere() {
        let releases = releases();
        let out = Command::new("sha256sum")
            .args(["-c", "--quiet", "SHA256SUMS"])
            .current_dir(&releases.dist)
            .output()
            .unwrap();
        check(out, "sha256sum -c SHA256SUMS");
        let elsewhere = scratch("elsewhere");
        let tarball = releases
            .dist
            .join(format!("sys1rust-{VERSION}-{PLATFORM}.tar.gz"));
        check(
            Command::new("tar")
                .arg("-xzf")
                .arg(&tarball)
                .arg("-C")
                .arg(&elsewhere)
                .output()
                .unwrap(),
            "tar -x",
        );
        let root = elsewhere.join(format!("sys1rust-{VERSION}-{PLATFORM}"));
        for file in [
            "bin/sys1rust",
            "lib/mlx/lib/libmlx.so",
            "lib/mlx_cpu.libs",
            "LICENSE",
            "README.md",
            "licenses/mlx/LICENSE",
            "licenses/mlx-c/LICENSE",
            "licenses/mlx-sys/LICENSE-MIT",
            "licenses/mlx-sys/LICENSE-APACHE",
        ] {
            assert!(root.join(file).exists(), "the bundle lacks {file}");
        }
        assert_eq!(
            std::fs::read_to_string(root.join("VERSION"))
                .unwrap()
                .trim(),
            VERSION
        );
        let out = check(
            Command::new(root.join("bin/sys1rust"))
                .arg("--version")
                .env_clear()
                .output()
                .unwrap(),
            "--version",
        );
        assert!(
            text(&out.stdout).starts_with(&format!("sys1rust {VERSION} (commit ")),
            "{}",
            text(&out.stdout)
        );
        serve_tiny(
            &root.join("bin/sys1rust"),
            &elsewhere,
            &root.join("lib/mlx/lib"),
        );
    }

    /// Install with the service (its model pulled first), serve from the install, update
    /// through `latest` with wget (restarting the service), uninstall: the models and the
    /// options file stay, nothing else does.
    #[test]
    fn install_update_uninstall() {
        let h = Home::new("install");
        let model = h.home.join(
            ".cache/huggingface/hub/models--convaiinnovations--laya-typed-decisions/blobs/0123",
        );
        std::fs::create_dir_all(model.parent().unwrap()).unwrap();
        std::fs::write(&model, "weights").unwrap();
        let fixture = h.serve_fixture();

        // 1. A named release, with the service.
        let out = check(
            h.install(&["--version", VERSION, "--service"], None),
            "install.sh --service",
        );
        let stdout = text(&out.stdout);
        let dest = h.data().join(VERSION);
        assert!(
            stdout.contains(&format!(
                "Installed sys1rust {VERSION} ({PLATFORM}) in {}",
                dest.display()
            )),
            "{stdout}"
        );
        assert!(
            stdout.contains("Add ") && stdout.contains("export PATH=\"$HOME/.local/bin:$PATH\""),
            "no PATH hint:\n{stdout}"
        );
        // `sys1rust pull` ran with the options file's SYS1_MODEL and printed where it is.
        assert!(
            stdout.contains("Downloading the models the service serves")
                && stdout.contains(&fixture.display().to_string()),
            "no pull of {}:\n{stdout}",
            fixture.display()
        );
        // The pull's own output may use stderr; install.sh itself warns of nothing.
        assert!(
            !text(&out.stderr).contains("sys1rust install:"),
            "stderr: {}",
            text(&out.stderr)
        );
        assert_eq!(
            std::fs::read_link(h.link()).unwrap(),
            dest.join("bin/sys1rust")
        );
        let unit = h.home.join(".config/systemd/user/sys1rust.service");
        assert_eq!(
            std::fs::read_to_string(&unit).unwrap(),
            rendered_service(&h.home, "systemd")
        );
        assert!(h.env_file().is_file());
        assert_eq!(
            h.log("systemctl"),
            [
                "--user show-environment",
                "--user daemon-reload",
                "--user enable --quiet sys1rust.service",
                "--user reset-failed sys1rust.service",
                "--user restart sys1rust.service"
            ]
        );
        let out = check(
            Command::new(h.link())
                .arg("--version")
                .env_clear()
                .output()
                .unwrap(),
            "sys1rust --version",
        );
        assert!(
            text(&out.stdout).starts_with(&format!("sys1rust {VERSION} (commit ")),
            "{}",
            text(&out.stdout)
        );
        serve_tiny(&h.link(), &h.home, &dest.join("lib/mlx/lib"));

        // 2. Again, for the latest release (a redirect), downloading with wget: it replaces the
        // install and restarts the running service.
        if have("wget") {
            h.clear_log("systemctl");
            let out = check(
                h.install(&[], Some(&path_without_curl(&h.dir).display().to_string())),
                "install.sh (update, wget)",
            );
            assert!(
                text(&out.stdout).contains(&format!(
                    "Updated sys1rust from {VERSION} to 9.0.1 ({PLATFORM})"
                )),
                "{}",
                text(&out.stdout)
            );
            assert_eq!(h.installed(), ["9.0.1"]);
            assert_eq!(
                std::fs::read_link(h.link()).unwrap(),
                h.data().join("9.0.1/bin/sys1rust")
            );
            assert_eq!(
                h.log("systemctl"),
                [
                    "--user show-environment",
                    "--user daemon-reload",
                    "--user try-restart sys1rust.service"
                ]
            );
            check(
                Command::new(h.link())
                    .arg("--version")
                    .env_clear()
                    .output()
                    .unwrap(),
                "sys1rust --version",
            );
        } else {
            eprintln!("wget is not installed: the update uses curl");
        }
        // ... and again with curl: idempotent.
        let out = check(h.install(&[], None), "install.sh (update)");
        if have("wget") {
            assert!(
                text(&out.stdout).contains(&format!("Reinstalled sys1rust 9.0.1 ({PLATFORM})")),
                "{}",
                text(&out.stdout)
            );
        }
        assert_eq!(h.installed(), ["9.0.1"]);
        assert_eq!(
            std::fs::read_link(h.link()).unwrap(),
            h.data().join("9.0.1/bin/sys1rust")
        );

        // 3. Uninstall: the options file (it may hold LAYA_API_KEY) stays, and it says so.
        h.clear_log("systemctl");
        let out = check(h.install(&["--uninstall"], None), "install.sh --uninstall");
        let stdout = text(&out.stdout);
        let cache = h.home.join(".cache/huggingface/hub");
        assert!(
            stdout.contains(&format!(
                "rm -rf {}/models--convaiinnovations--laya*",
                cache.display()
            )),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "Kept the service's options file {}",
                h.env_file().display()
            )),
            "{stdout}"
        );
        assert_eq!(
            h.files(),
            [
                model.strip_prefix(&h.home).unwrap().display().to_string(),
                ".config/sys1rust/env".to_owned()
            ]
        );
        assert_eq!(
            h.log("systemctl")[1],
            "--user disable --now --quiet sys1rust.service"
        );
        assert_eq!(
            std::fs::read_dir(&h.tmp).unwrap().count(),
            0,
            "install.sh left files in TMPDIR"
        );
    }

    /// A tarball that does not match SHA256SUMS, a release that does not exist and a platform
    /// without releases change nothing.
    #[test]
    fn bad_downloads_and_platforms_are_refused() {
        let h = Home::new("refuse");
        check(h.install(&["--version", VERSION], None), "install.sh");
        let before = h.files();

        let out = h.install(&["--version", "9.0.2"], None);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "a tampered tarball was installed");
        assert!(
            stderr.contains("does not match SHA256SUMS") && stderr.contains("refusing"),
            "{stderr}"
        );

        let out = h.install(&["--version", "8.8.8"], None);
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("is there a release 8.8.8?"),
            "{}",
            text(&out.stderr)
        );

        // Linux on Arm asks for its own bundle, which this release lacks; a CPU without
        // releases is named.
        for (machine, refusal) in [
            ("aarch64", "the latest release"),
            ("aarch64", "has no linux-aarch64-cpu build"),
            ("riscv64", "there is no sys1rust release for Linux riscv64"),
        ] {
            let bin = h.dir.join(machine);
            std::fs::create_dir_all(&bin).unwrap();
            write_script(
                &bin.join("uname"),
                &format!("case $1 in -m) echo {machine} ;; *) echo Linux ;; esac"),
            );
            let out = h.install(&[], Some(&before_system(&bin)));
            let stderr = text(&out.stderr);
            assert!(!out.status.success(), "{machine}: {stderr}");
            assert!(stderr.contains(refusal), "{machine}: {stderr}");
        }

        let out = h.install(&[], None);
        assert!(out.status.success());
        assert_eq!(
            h.installed(),
            ["9.0.1"],
            "a refused download left something behind, or the retry failed"
        );
        check(h.install(&["--version", VERSION], None), "install.sh");
        assert_eq!(h.files(), before, "refused installs changed HOME");
        assert_eq!(
            std::fs::read_dir(&h.tmp).unwrap().count(),
            0,
            "install.sh left files in TMPDIR"
        );
    }

    /// The macOS path, with `uname` saying Darwin arm64 and a stand-in `launchctl`: the
    /// LaunchAgent is written, bootstrapped, kicked on an update and booted out on uninstall,
    /// which keeps the options file.
    #[test]
    fn macos_launch_agent() {
        let h = Home::new("macos");
        h.serve_fixture();
        let mac = h.dir.join("mac");
        std::fs::create_dir_all(&mac).unwrap();
        write_script(
            &mac.join("uname"),
            "case $1 in -m) echo arm64 ;; *) echo Darwin ;; esac",
        );
        // launchctl print answers for a loaded agent.
        let out = check(
            h.install_with(&["--service"], Some(&before_system(&mac)), None),
            "install.sh --service (macOS)",
        );
        assert!(
            text(&out.stdout).contains("Installed sys1rust 9.0.1 (macos-arm64)"),
            "{}",
            text(&out.stdout)
        );
        let plist = h.home.join("Library/LaunchAgents/io.github.sys1rust.plist");
        assert_eq!(
            std::fs::read_to_string(&plist).unwrap(),
            rendered_service(&h.home, "launchd")
        );
        let uid = text(&Command::new("id").arg("-u").output().unwrap().stdout)
            .trim()
            .to_owned();
        assert_eq!(
            h.log("launchctl"),
            [
                format!("bootout gui/{uid}/io.github.sys1rust"),
                format!("bootstrap gui/{uid} {}", plist.display())
            ]
        );
        assert!(h.home.join("Library/Logs").is_dir());
        h.clear_log("launchctl");
        check(
            h.install_with(&[], Some(&before_system(&mac)), None),
            "install.sh (macOS update)",
        );
        assert_eq!(
            h.log("launchctl"),
            [
                format!("print gui/{uid}/io.github.sys1rust"),
                format!("kickstart -k gui/{uid}/io.github.sys1rust")
            ]
        );
        std::fs::write(h.home.join("Library/Logs/sys1rust.log"), "log").unwrap();
        check(
            h.install_with(&["--uninstall"], Some(&before_system(&mac)), None),
            "install.sh --uninstall (macOS)",
        );
        assert_eq!(h.files(), [".config/sys1rust/env"]);
    }

    /// `--service` pulls the service's model before it writes or enables anything: when that
    /// fails (here: offline, and the model is not cached) install.sh says why and how to retry,
    /// the binary stays installed and no unit is written; with a model it can get, the retry
    /// installs the service.
    #[test]
    fn service_needs_its_model_first() {
        let h = Home::new("no-model");
        h.write_env("SYS1_MODEL=typed-decisions\nHF_HUB_OFFLINE=1\n");
        let out = h.install(&["--version", VERSION, "--service"], None);
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success(),
            "installed a service without its model"
        );
        for needle in [
            "is not in the cache",
            "could not download the models the service serves",
            "run this again with --service",
            "HF_ENDPOINT",
            "HF_HUB_OFFLINE=1",
        ] {
            assert!(
                stderr.contains(needle),
                "stderr lacks {needle:?}:\n{stderr}"
            );
        }
        let unit = h.home.join(".config/systemd/user/sys1rust.service");
        assert!(!unit.exists(), "a unit was written");
        assert_eq!(h.log("systemctl"), ["--user show-environment"]);
        assert_eq!(
            std::fs::read_link(h.link()).unwrap(),
            h.data().join(VERSION).join("bin/sys1rust")
        );

        h.clear_log("systemctl");
        h.serve_fixture();
        let out = check(
            h.install(&["--version", VERSION, "--service"], None),
            "install.sh --service (retry)",
        );
        assert!(
            text(&out.stdout).contains(&format!("Reinstalled sys1rust {VERSION} ({PLATFORM})")),
            "{}",
            text(&out.stdout)
        );
        assert!(unit.is_file());
        assert!(h
            .log("systemctl")
            .contains(&"--user enable --quiet sys1rust.service".to_owned()));
    }

    /// `--uninstall` keeps the options file and the kernel cache and says where they are;
    /// `--purge` (an uninstall too) removes both. Downloaded models stay either way.
    #[test]
    fn uninstall_keeps_options_purge_removes_them() {
        let h = Home::new("purge");
        let model = h.home.join(
            ".cache/huggingface/hub/models--convaiinnovations--laya-typed-decisions/blobs/0123",
        );
        std::fs::create_dir_all(model.parent().unwrap()).unwrap();
        std::fs::write(&model, "weights").unwrap();
        let kernels = h.home.join(".cache/sys1rust/kernels/laya-cuda-0.cubin");
        std::fs::create_dir_all(kernels.parent().unwrap()).unwrap();
        std::fs::write(&kernels, "cubin").unwrap();
        h.write_env("LAYA_API_KEY=a-long-secret\n");
        check(h.install(&["--version", VERSION], None), "install.sh");

        let out = check(h.install(&["--uninstall"], None), "install.sh --uninstall");
        let stdout = text(&out.stdout);
        for needle in [
            format!("Kept the service's options file {}", h.env_file().display()),
            format!(
                "Kept the compiled-kernel cache {}",
                h.home.join(".cache/sys1rust").display()
            ),
            "--purge deletes it".to_owned(),
        ] {
            assert!(stdout.contains(&needle), "no {needle:?}:\n{stdout}");
        }
        assert_eq!(
            h.files(),
            [
                model.strip_prefix(&h.home).unwrap().display().to_string(),
                ".cache/sys1rust/kernels/laya-cuda-0.cubin".to_owned(),
                ".config/sys1rust/env".to_owned()
            ]
        );
        assert_eq!(
            std::fs::read_to_string(h.env_file()).unwrap(),
            "LAYA_API_KEY=a-long-secret\n"
        );

        // --purge alone, after the uninstall, removes what it kept.
        let out = check(h.install(&["--purge"], None), "install.sh --purge");
        let stdout = text(&out.stdout);
        for needle in [
            format!(
                "Deleted the service's options file {}",
                h.env_file().display()
            ),
            format!(
                "Deleted the compiled-kernel cache {}",
                h.home.join(".cache/sys1rust").display()
            ),
            format!(
                "rm -rf {}/models--convaiinnovations--laya*",
                h.home.join(".cache/huggingface/hub").display()
            ),
        ] {
            assert!(stdout.contains(&needle), "no {needle:?}:\n{stdout}");
        }
        assert_eq!(
            h.files(),
            [model.strip_prefix(&h.home).unwrap().display().to_string()]
        );

        // --purge on an install removes the install too.
        h.write_env("LAYA_API_KEY=a-long-secret\n");
        check(h.install(&["--version", VERSION], None), "install.sh");
        check(h.install(&["--purge"], None), "install.sh --purge");
        assert_eq!(
            h.files(),
            [model.strip_prefix(&h.home).unwrap().display().to_string()]
        );
        assert!(!h.data().exists());
    }
}
