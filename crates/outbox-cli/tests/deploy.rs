//! The deployment files of `deploy/` are checked against the binary they deploy: the
//! Kubernetes ConfigMap's configuration passes `outbox check` with the secrets the Deployment
//! injects (and fails without the tokens, which the admin listener requires off loopback); the
//! probes, the Prometheus annotations and the Service point at the port the configuration's
//! `[admin]` listens on; the container runs `relay --config` on the mounted file, hardened;
//! the systemd unit runs the same commands with the sandboxing it documents.
//!
//! And both pass real validators, which must reject a deliberately broken copy (so neither check
//! can pass vacuously): the manifests `kubernetes-validate --strict` (PyPI; it bundles the
//! Kubernetes JSON schemas, so it works offline) against the oldest and newest Kubernetes it
//! knows, the unit `systemd-analyze verify` (no running systemd needed). Both are installed by
//! `scripts/install-foreign-deps.sh`; a missing validator fails these tests, never skips them.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use outbox_testkit::fs::temp_dir;
use serde::Deserialize;
use serde_yaml::Value;

const OUTBOX: &str = env!("CARGO_BIN_EXE_outbox");
const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");
/// The schema versions the manifests are validated against: the oldest and the newest that
/// kubernetes-validate 1.37.0 (the version scripts/install-foreign-deps.sh pins) bundles.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.25.0", "1.37.0"];
const INSTALL: &str = "run scripts/install-foreign-deps.sh to install it";

fn manifests() -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{DEPLOY}/kubernetes/outbox-relay.yaml")).unwrap();
    serde_yaml::Deserializer::from_str(&text).map(|doc| Value::deserialize(doc).unwrap()).collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in the manifests"))
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

#[test]
fn the_kubernetes_manifests_fit_the_binary() {
    let docs = manifests();
    let config_map = kind(&docs, "ConfigMap");
    let toml_text = s(&config_map["data"]["outbox.toml"]);
    let deployment = kind(&docs, "Deployment");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];

    // The configuration passes `outbox check` with the Deployment's secrets, and not without
    // the tokens.
    let dir = temp_dir("outbox-deploy");
    let path = dir.join("outbox.toml");
    std::fs::write(&path, toml_text).unwrap();
    let env: Vec<&str> = container["env"].as_sequence().unwrap().iter().map(|e| s(&e["name"])).collect();
    for (name, secret_key) in [
        ("OUTBOX__STORES__0__URL", "store-url"),
        ("OUTBOX__ADMIN__READ_TOKEN", "read-token"),
        ("OUTBOX__ADMIN__ADMIN_TOKEN", "admin-token"),
    ] {
        let e = container["env"].as_sequence().unwrap().iter().find(|e| e["name"] == name);
        let e = e.unwrap_or_else(|| panic!("{name} is not set: {env:?}"));
        assert_eq!(s(&e["valueFrom"]["secretKeyRef"]["key"]), secret_key, "{name} comes from the Secret");
    }
    let check = |with_tokens: bool| {
        let mut cmd = Command::new(OUTBOX);
        cmd.args(["check", "--config", path.to_str().unwrap()]).env(
            "OUTBOX__STORES__0__URL",
            "postgres://outbox:pw@postgres.default.svc:5432/orders?sslmode=require",
        );
        if with_tokens {
            cmd.env("OUTBOX__ADMIN__READ_TOKEN", "r-0123456789abcdef0123")
                .env("OUTBOX__ADMIN__ADMIN_TOKEN", "a-0123456789abcdef0123");
        }
        cmd.output().unwrap()
    };
    let ok = check(true);
    assert!(ok.status.success(), "outbox check: {}", String::from_utf8_lossy(&ok.stderr));
    let refused = check(false);
    assert!(!refused.status.success(), "tokens are required off loopback");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("admin.read_token"));

    // The admin port, as the configuration says, everywhere it is used.
    let config: toml::Value = toml::from_str(toml_text).unwrap();
    let listen = config["admin"]["listen"].as_str().unwrap();
    let port: i64 = listen.rsplit(':').next().unwrap().parse().unwrap();
    let ports = container["ports"].as_sequence().unwrap();
    let admin = ports.iter().find(|p| p["name"] == "admin").expect("a port named admin");
    assert_eq!(admin["containerPort"].as_i64(), Some(port));
    assert_eq!(s(&container["livenessProbe"]["httpGet"]["path"]), "/healthz");
    assert_eq!(s(&container["readinessProbe"]["httpGet"]["path"]), "/readyz");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(s(&container[probe]["httpGet"]["port"]), "admin", "{probe}");
    }
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(s(&annotations["prometheus.io/port"]).parse::<i64>().unwrap(), port);
    assert_eq!(s(&annotations["prometheus.io/path"]), "/metrics");
    assert_eq!(s(&kind(&docs, "Service")["spec"]["ports"][0]["targetPort"]), "admin");

    // The container runs the relay on the mounted file, without privileges.
    let mount =
        container["volumeMounts"].as_sequence().unwrap().iter().find(|m| m["name"] == "config").unwrap();
    let args: Vec<&str> = container["args"].as_sequence().unwrap().iter().map(s).collect();
    assert_eq!(args, ["relay", "--config", &format!("{}/outbox.toml", s(&mount["mountPath"]))]);
    let volume =
        pod["spec"]["volumes"].as_sequence().unwrap().iter().find(|v| v["name"] == "config").unwrap();
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"]);
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(container["securityContext"]["allowPrivilegeEscalation"].as_bool(), Some(false));
    // Longer than the relay's shutdown (10 s by default): leases are released, not abandoned.
    assert!(pod["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap() > 10);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_systemd_unit_runs_the_checked_relay_sandboxed() {
    let unit = std::fs::read_to_string(format!("{DEPLOY}/systemd/outbox-relay.service")).unwrap();
    let value = |key: &str| -> &str {
        unit.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
            .unwrap_or_else(|| panic!("{key} is not set"))
    };
    assert_eq!(value("ExecStart"), "/usr/local/bin/outbox relay --config /etc/outbox/outbox.toml");
    assert_eq!(value("ExecStartPre"), "/usr/local/bin/outbox check --config /etc/outbox/outbox.toml");
    for (key, want) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("DynamicUser", "yes"),
        ("KillSignal", "SIGTERM"),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(value(key), want, "{key}");
    }
    assert!(value("TimeoutStopSec").parse::<u64>().unwrap() > 10, "longer than the relay's shutdown");
    // The commands the unit runs exist with these arguments.
    for sub in ["relay", "check"] {
        let out = Command::new(OUTBOX).args([sub, "--help"]).output().unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("--config"), "outbox {sub} --config");
    }
}

/// The validator scripts/install-foreign-deps.sh installs in its own venv
/// (`$OUTBOX_KUBERNETES_VALIDATE` overrides the path).
fn kubernetes_validate() -> PathBuf {
    let path = std::env::var_os("OUTBOX_KUBERNETES_VALIDATE").map_or_else(
        || {
            let home = std::env::var_os("HOME").expect("HOME is set");
            Path::new(&home).join(".cache/outbox/kubernetes-validate/bin/kubernetes-validate")
        },
        PathBuf::from,
    );
    assert!(path.is_file(), "kubernetes-validate is not installed at {}: {INSTALL}", path.display());
    path
}

fn output_text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn validate_manifests(path: &Path, version: &str) -> Output {
    Command::new(kubernetes_validate())
        .args(["--strict", "--quiet", "-k", version])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("kubernetes-validate does not run ({e}): {INSTALL}"))
}

#[test]
fn the_kubernetes_manifests_pass_kubernetes_validate_strict() {
    let path = PathBuf::from(format!("{DEPLOY}/kubernetes/outbox-relay.yaml"));
    for version in KUBERNETES_VERSIONS {
        let out = validate_manifests(&path, version);
        let text = output_text(&out);
        // --quiet prints only warnings and failures: there must be none.
        assert!(out.status.success() && text.trim().is_empty(), "Kubernetes {version}: {text}");
    }

    // Broken copies are rejected, naming what is wrong: a misspelled field (only --strict
    // rejects unknown fields), a wrong type, a missing required field.
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = temp_dir("outbox-deploy-k8s");
    for (what, from, to, expected) in [
        (
            "a misspelled field",
            "readOnlyRootFilesystem: true",
            "readOnlyRootFileSystem: true",
            "'readOnlyRootFileSystem' was unexpected",
        ),
        (
            "a string for an integer",
            "replicas: 2",
            "replicas: two",
            "spec.replicas: 'two' is not of type 'integer'",
        ),
        ("no container name", "- name: relay\n", "- stdin: false\n", "'name' is a required property"),
        (
            "a misspelled PodDisruptionBudget field",
            "minAvailable: 1",
            "minAvailabel: 1",
            "'minAvailabel' was unexpected",
        ),
    ] {
        assert_eq!(text.matches(from).count(), 1, "{what}: {from:?} is in the manifests once");
        let broken = dir.join("outbox-relay.yaml");
        std::fs::write(&broken, text.replace(from, to)).unwrap();
        for version in KUBERNETES_VERSIONS {
            let out = validate_manifests(&broken, version);
            let output = output_text(&out);
            assert!(!out.status.success(), "{what} passes against Kubernetes {version}: {output}");
            assert!(output.contains(expected), "{what}, Kubernetes {version}: {expected:?} not in {output}");
        }
    }
    std::fs::remove_dir_all(dir).ok();
}

/// `systemd-analyze verify` on a copy of the unit in a temporary directory, its
/// `/usr/local/bin/outbox` replaced by the binary under test: verify fails on an `ExecStart`
/// binary that does not exist, and the unit's path is where the binary is installed, not built.
fn verify_unit(unit: &str) -> Output {
    let dir = temp_dir("outbox-deploy-systemd");
    let path = dir.join("outbox-relay.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/outbox", OUTBOX)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("systemd-analyze does not run ({e}): {INSTALL}"));
    std::fs::remove_dir_all(dir).ok();
    out
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let unit = std::fs::read_to_string(format!("{DEPLOY}/systemd/outbox-relay.service")).unwrap();
    assert!(unit.contains("/usr/local/bin/outbox relay"), "the unit runs /usr/local/bin/outbox");
    let out = verify_unit(&unit);
    let text = output_text(&out);
    // No error and no warning.
    assert!(out.status.success() && text.trim().is_empty(), "systemd-analyze verify: {text}");

    // Broken copies: verify names the bad line. It only warns (exit 0) on an unknown directive or
    // a bad value, which is why the real unit must print nothing; a missing binary fails it.
    for (what, from, to, expected, fails) in [
        (
            "an unknown directive in [Service]",
            "NoNewPrivileges=yes",
            "NoNewPrivilege=yes",
            "Unknown key 'NoNewPrivilege' in section [Service]",
            false,
        ),
        (
            "a bad value",
            "Restart=on-failure",
            "Restart=sometimes",
            "Failed to parse service restart specifier",
            false,
        ),
        (
            "a missing binary",
            "ExecStart=/usr/local/bin/outbox",
            "ExecStart=/nonexistent/outbox",
            "Command /nonexistent/outbox is not executable",
            true,
        ),
    ] {
        assert_eq!(unit.matches(from).count(), 1, "{what}: {from:?} is in the unit once");
        let out = verify_unit(&unit.replace(from, to));
        let text = output_text(&out);
        assert!(text.contains(expected), "{what}: {expected:?} not in {text:?}");
        assert!(!fails || !out.status.success(), "{what} fails verify: {text}");
    }
}
