//! A test PKI made fresh by each test (`rcgen`), and TLS-only servers of the test's own on free
//! ports: PostgreSQL, MariaDB, Redis, NATS, Mosquitto and RabbitMQ, started from the binaries
//! the machine has. The shared servers are never reconfigured.
//!
//! The certificates, in [`Pki::dir`]:
//! - `ca.pem`: the test CA; `other-ca.pem`: a CA that signed nothing the servers present;
//! - `server.pem`/`server.key`: valid for `localhost` only (so `127.0.0.1` is a wrong host name);
//! - `expired.pem`/`expired.key`: the same names, expired in 2020;
//! - `client.pem`/`client.key`: a client certificate with common name `outbox`;
//! - `stranger.pem`/`stranger.key`: a client certificate signed by the other CA.
//!
//! Keys are PKCS#8 PEM, readable by every user (the PostgreSQL server runs as `postgres`): test
//! material only.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
    IsCa, KeyPair, KeyUsagePurpose,
};

use crate::fs::temp_dir;
use crate::net::free_port;
use crate::process::KillOnDrop;

/// The host name the server certificates are valid for.
pub const HOST: &str = "localhost";
/// The client certificate's common name (the database user it authenticates as).
pub const CLIENT_CN: &str = "outbox";

/// A directory of certificates and keys for one test; removed on drop.
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// Generates every certificate (see the module docs).
    pub fn new() -> Pki {
        let dir = temp_dir("outbox-pki");
        let ca = new_ca("outbox test CA");
        let other = new_ca("somebody else's CA");
        write(&dir, "ca.pem", &ca.pem());
        write(&dir, "other-ca.pem", &other.pem());
        let server = |name: &str, expired: bool| {
            let mut p = CertificateParams::new(vec![HOST.to_owned()]).unwrap();
            p.distinguished_name.push(DnType::CommonName, HOST);
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            if expired {
                p.not_before = date_time_ymd(2019, 1, 1);
                p.not_after = date_time_ymd(2020, 1, 1);
            }
            leaf(&dir, name, p, &ca);
        };
        server("server", false);
        server("expired", true);
        let client = |name: &str, issuer: &CertifiedIssuer<'static, KeyPair>| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name.push(DnType::CommonName, CLIENT_CN);
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            leaf(&dir, name, p, issuer);
        };
        client("client", &ca);
        client("stranger", &other);
        Pki { dir }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `name` (`ca.pem`, `server.key`, ...).
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

impl Default for Pki {
    fn default() -> Pki {
        Pki::new()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn new_ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    p.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(dir: &Path, name: &str, mut p: CertificateParams, issuer: &CertifiedIssuer<'static, KeyPair>) {
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, issuer).unwrap();
    write(dir, &format!("{name}.pem"), &cert.pem());
    write(dir, &format!("{name}.key"), &key.serialize_pem());
}

fn write(dir: &Path, name: &str, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

fn wait_for(mut ready: impl FnMut() -> bool, within: Duration, what: &str, log: &Path) {
    let deadline = Instant::now() + within;
    while !ready() {
        if Instant::now() > deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{what} did not start within {within:?}; its log:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server of the test's own: the process (killed on drop), its port, its directory (removed).
pub struct TlsServer {
    child: Option<KillOnDrop>,
    port: u16,
    dir: PathBuf,
    stop: Option<Box<dyn FnOnce() + Send>>,
    /// Makes the server re-read `tls.pem`/`tls.key` in its directory (PostgreSQL, MariaDB).
    reload: Option<Box<dyn Fn() + Send>>,
}

impl TlsServer {
    /// Its TLS port on 127.0.0.1 (the only port it listens on, but for PostgreSQL, which takes
    /// plain and TLS connections on one port and refuses the plain ones).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Makes the server present `name`'s certificate (`expired`, say) to the connections it
    /// accepts from now on (PostgreSQL and MariaDB re-read their certificates; the others
    /// panic). The switch may take a moment: wait for its effect.
    pub fn presents(&self, pki: &Pki, name: &str) {
        server_certificate(&self.dir, pki, name);
        (self.reload.as_ref().expect("this server cannot re-read its certificate"))();
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
        if let Some(mut c) = self.child.take() {
            c.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn chown_postgres(path: &Path) {
    run(Command::new("chown").args(["-R", "postgres:postgres", path.to_str().unwrap()]), "chown");
}

fn pg_bin(tool: &str) -> PathBuf {
    let base = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<_> =
        std::fs::read_dir(base).expect("PostgreSQL's binaries under /usr/lib/postgresql").flatten().collect();
    versions.sort_by_key(|e| e.file_name());
    versions.last().expect("a PostgreSQL version under /usr/lib/postgresql").path().join("bin").join(tool)
}

/// A PostgreSQL cluster of the test's own (run as the `postgres` user: the server refuses
/// root). TLS connections only: `hostnossl` is rejected. The user `postgres` may connect with
/// TLS and no password; the user [`CLIENT_CN`] only with a client certificate the CA signed.
/// [`TlsServer::presents`] changes the certificate it presents.
pub fn postgres(pki: &Pki) -> TlsServer {
    let dir = temp_dir("outbox-tls-pg");
    let data = dir.join("data");
    chown_postgres(&dir);
    run(
        Command::new("runuser").args(["-u", "postgres", "--"]).arg(pg_bin("initdb")).args([
            "-D",
            data.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ]),
        "initdb",
    );
    let hba = format!(
        "local all all trust\nhostssl all {CLIENT_CN} 127.0.0.1/32 cert\nhostssl all {CLIENT_CN} ::1/128 cert\n\
         hostssl all postgres 127.0.0.1/32 trust\nhostssl all postgres ::1/128 trust\n\
         hostnossl all all 0.0.0.0/0 reject\nhostnossl all all ::/0 reject\n"
    );
    std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
    server_certificate(&dir, pki, "server");
    let port = free_port();
    let log = dir.join("server.log");
    let child = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(pg_bin("postgres"))
        .args(["-D", data.to_str().unwrap(), "-p", &port.to_string(), "-k", dir.to_str().unwrap()])
        .args(["-c", "listen_addresses=localhost", "-c", "ssl=on", "-c", "fsync=off"])
        .arg("-c")
        .arg(format!("ssl_cert_file={}", dir.join("tls.pem").display()))
        .arg("-c")
        .arg(format!("ssl_key_file={}", dir.join("tls.key").display()))
        .arg("-c")
        .arg(format!("ssl_ca_file={}", pki.path("ca.pem")))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start postgres");
    // runuser forks the server as its child; its own pid is what we hold, and a SIGKILL of
    // runuser would leave the server running: stop it with pg_ctl, then kill what is left.
    let stop_data = data.clone();
    let pid_file = data.join("postmaster.pid");
    let server = TlsServer {
        child: Some(KillOnDrop(child)),
        port,
        dir: dir.clone(),
        stop: Some(Box::new(move || {
            let _ = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(pg_bin("pg_ctl"))
                .args(["stop", "-m", "immediate", "-D", stop_data.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        })),
        reload: Some(Box::new(move || {
            let text = std::fs::read_to_string(&pid_file).unwrap();
            let pid = text.lines().next().unwrap().trim().to_owned();
            assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
        })),
    };
    // Ready when it accepts connections (`pg_isready`), not when its port opens: a server
    // still replaying or starting answers "the database system is starting up" (seen under a
    // load average of 27).
    let sockets = dir.clone();
    let accepting = move || {
        Command::new(pg_bin("pg_isready"))
            .args([
                "-q",
                "-h",
                sockets.to_str().unwrap_or_default(),
                "-p",
                &port.to_string(),
                "-d",
                "postgres",
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    wait_for(
        || data.join("postmaster.pid").exists() && port_open(port) && accepting(),
        Duration::from_secs(60),
        "postgres",
        &log,
    );
    run(
        Command::new("runuser").args(["-u", "postgres", "--"]).arg(pg_bin("psql")).args([
            "-h",
            dir.to_str().unwrap(),
            "-p",
            &port.to_string(),
            "-d",
            "postgres",
            "-c",
            &format!("CREATE ROLE {CLIENT_CN} LOGIN SUPERUSER"),
        ]),
        "psql (create the certificate user)",
    );
    server
}

/// Copies `name`'s certificate and key to `tls.pem`/`tls.key` in a database server's directory:
/// owned by `postgres`, the key mode 0600 (PostgreSQL refuses any other; root reads it anyway).
fn server_certificate(dir: &Path, pki: &Pki, name: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::copy(pki.dir.join(format!("{name}.pem")), dir.join("tls.pem")).unwrap();
    std::fs::copy(pki.dir.join(format!("{name}.key")), dir.join("tls.key")).unwrap();
    std::fs::set_permissions(dir.join("tls.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    chown_postgres(dir);
}

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

/// A MariaDB server of the test's own that requires TLS on every connection (`root` with no
/// password over TLS; the user [`CLIENT_CN`] only with a client certificate the CA signed).
/// `FLUSH SSL` makes it re-read its certificates.
pub fn mariadb(pki: &Pki) -> TlsServer {
    let dir = temp_dir("outbox-tls-mariadb");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    run(
        Command::new("mariadb-install-db").args([
            "--no-defaults",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            &format!("--datadir={}", data.display()),
        ]),
        "mariadb-install-db",
    );
    server_certificate(&dir, pki, "server");
    let port = free_port();
    let log = dir.join("error.log");
    let child = Command::new("mariadbd")
        .args(["--no-defaults", "--user=root", "--bind-address=127.0.0.1", "--skip-name-resolve"])
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--port={port}"))
        .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
        .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
        .arg(format!("--log-error={}", log.display()))
        .arg(format!("--ssl-ca={}", pki.path("ca.pem")))
        .arg(format!("--ssl-cert={}", dir.join("tls.pem").display()))
        .arg(format!("--ssl-key={}", dir.join("tls.key").display()))
        .args([
            "--require-secure-transport=ON",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mariadbd");
    let sock = dir.join("mysqld.sock");
    let client = {
        let sock = sock.clone();
        move || {
            let mut c = Command::new("mariadb");
            c.args(["--no-defaults", "-uroot"]).arg(format!("--socket={}", sock.display()));
            c
        }
    };
    let flush = client.clone();
    let server = TlsServer {
        child: Some(KillOnDrop(child)),
        port,
        dir: dir.clone(),
        stop: None,
        reload: Some(Box::new(move || run(flush().args(["-e", "FLUSH SSL"]), "FLUSH SSL"))),
    };
    wait_for(|| sock.exists() && port_open(port), Duration::from_secs(60), "mariadbd", &log);
    let sql = format!(
        "CREATE DATABASE test; CREATE USER '{CLIENT_CN}'@'%' REQUIRE X509; \
         GRANT ALL ON *.* TO '{CLIENT_CN}'@'%';"
    );
    run(client().args(["-e", &sql]), "mariadb (create the test users)");
    server
}

/// Starts `cmd` (its output discarded), a server of the test's own in `dir` that is nothing but
/// its process, and waits up to 30 s for it to listen on `port` (or panics with its `log`).
fn started(mut cmd: Command, what: &str, port: u16, dir: PathBuf, log: &Path) -> TlsServer {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let server = TlsServer { child: Some(KillOnDrop(child)), port, dir, stop: None, reload: None };
    wait_for(|| port_open(port), Duration::from_secs(30), what, log);
    server
}

/// A Redis server of the test's own with only a TLS port. Client certificates are asked for
/// and checked when sent (`tls-auth-clients optional`), or required with `require_client`.
pub fn redis(pki: &Pki, require_client: bool) -> TlsServer {
    let dir = temp_dir("outbox-tls-redis");
    let port = free_port();
    let log = dir.join("redis.log");
    let mut child = Command::new("redis-server");
    child
        .args(["--port", "0", "--tls-port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--dir", dir.to_str().unwrap()])
        .args(["--logfile", log.to_str().unwrap()])
        .args(["--tls-cert-file", &pki.path("server.pem"), "--tls-key-file", &pki.path("server.key")])
        .args(["--tls-ca-cert-file", &pki.path("ca.pem")])
        .args(["--tls-auth-clients", if require_client { "yes" } else { "optional" }]);
    started(child, "redis-server", port, dir, &log)
}

/// A `nats-server` of the test's own with JetStream, TLS required; client certificates
/// required too with `require_client`.
pub fn nats(pki: &Pki, require_client: bool) -> TlsServer {
    let program = std::env::var("OUTBOX_TEST_NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
    configured("nats", &program, |dir, port, log| {
        format!(
            "listen: \"127.0.0.1:{port}\"\nlog_file: \"{}\"\njetstream {{ store_dir: \"{}\" }}\n\
             tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: {require_client}, timeout: 5 }}\n",
            log.display(),
            dir.join("js").display(),
            pki.path("server.pem"),
            pki.path("server.key"),
            pki.path("ca.pem"),
        )
    })
}

/// A Mosquitto broker of the test's own with one TLS listener; client certificates required
/// with `require_client`.
pub fn mosquitto(pki: &Pki, require_client: bool) -> TlsServer {
    configured("mosquitto", "mosquitto", |_, port, log| {
        format!(
            "user root\nper_listener_settings false\nallow_anonymous true\npersistence false\n\
             log_dest file {}\nlistener {port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\n\
             require_certificate {require_client}\n",
            log.display(),
            pki.path("ca.pem"),
            pki.path("server.pem"),
            pki.path("server.key"),
        )
    })
}

/// A server of the test's own configured by one file, `<name>.conf` in its directory: `conf`
/// writes it from the directory, the port and the log file; `program -c <file>` runs it.
fn configured(name: &str, program: &str, conf: impl FnOnce(&Path, u16, &Path) -> String) -> TlsServer {
    let dir = temp_dir(&format!("outbox-tls-{name}"));
    let port = free_port();
    let log = dir.join(format!("{name}.log"));
    let file = dir.join(format!("{name}.conf"));
    std::fs::write(&file, conf(&dir, port, &log)).unwrap();
    let mut child = Command::new(program);
    child.arg("-c").arg(file);
    started(child, program, port, dir, &log)
}

/// A RabbitMQ node of the test's own (its own node name, ports, database and no plugins) with
/// an AMQPS listener only; `guest`/`guest` may connect from anywhere. Client certificates are
/// checked when sent, required with `require_client`. Starting a node takes several seconds.
pub fn rabbitmq(pki: &Pki, require_client: bool) -> TlsServer {
    let dir = temp_dir("outbox-tls-rabbitmq");
    let port = free_port();
    let node = format!("outbox-tls-{port}@localhost");
    let conf = format!(
        "listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:{port}\nloopback_users = none\n\
         ssl_options.cacertfile = {}\nssl_options.certfile = {}\nssl_options.keyfile = {}\n\
         ssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = {require_client}\n\
         log.console = false\nlog.file.level = info\n",
        pki.path("ca.pem"),
        pki.path("server.pem"),
        pki.path("server.key"),
    );
    std::fs::write(dir.join("rabbitmq.conf"), conf).unwrap();
    std::fs::write(dir.join("enabled_plugins"), "[].\n").unwrap();
    // The Debian wrapper (/usr/sbin) would switch to the rabbitmq user, who cannot read the
    // test's directory: run the server's own script as root, with a home (Erlang cookie) here.
    let sbin = rabbitmq_sbin();
    let env = |cmd: &mut Command| {
        cmd.env("HOME", &dir)
            .env("RABBITMQ_NODENAME", &node)
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_PID_FILE", dir.join("rabbitmq.pid"))
            .env("RABBITMQ_DIST_PORT", free_port().to_string());
    };
    let mut cmd = Command::new(sbin.join("rabbitmq-server"));
    env(&mut cmd);
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start rabbitmq-server");
    let mut stop = Command::new(sbin.join("rabbitmqctl"));
    env(&mut stop);
    stop.args(["-n", &node, "stop"]).stdout(Stdio::null()).stderr(Stdio::null());
    let server = TlsServer {
        child: Some(KillOnDrop(child)),
        port,
        dir: dir.clone(),
        stop: Some(Box::new(move || {
            let _ = stop.status();
        })),
        reload: None,
    };
    let log = dir.join("log").join(format!("{node}.log"));
    wait_for(|| port_open(port), Duration::from_secs(120), "rabbitmq-server", &log);
    server
}

fn rabbitmq_sbin() -> PathBuf {
    let base = Path::new("/usr/lib/rabbitmq/lib");
    let mut versions: Vec<_> = std::fs::read_dir(base)
        .expect("RabbitMQ under /usr/lib/rabbitmq/lib")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("rabbitmq_server-"))
        .collect();
    versions.sort_by_key(|e| e.file_name());
    versions.last().expect("a rabbitmq_server-* under /usr/lib/rabbitmq/lib").path().join("sbin")
}
