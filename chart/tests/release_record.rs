//! Release records written by the real helm v4.1.4 into a test cluster
//! (`tests/fixtures/release`, made by its `regenerate.sh`): they decode, re-encode to the
//! same JSON bytes, carry the expected Secret metadata, and their stored chart equals the
//! one this crate builds from the same chart directory and values.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use flotilla_chart::dependencies::process_dependencies;
use flotilla_chart::release::{
    HookEvent, HookPhase, RecordChart, Release, Status, StorageOp, decode_release,
    decode_to_json_bytes, encode_release, filter_system_labels, secret_for, to_json,
};
use flotilla_chart::time::GoTime;
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/release")
}

struct Captured {
    name: String,
    labels: BTreeMap<String, String>,
    secret_type: String,
    release_value: String,
}

fn captured(version: u32) -> Captured {
    let secret: Value = serde_json::from_slice(
        &std::fs::read(fixture().join(format!("secret-v{version}.json"))).unwrap(),
    )
    .unwrap();
    let data = secret["data"]["release"].as_str().unwrap();
    let inner = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    Captured {
        name: secret["metadata"]["name"].as_str().unwrap().to_owned(),
        labels: serde_json::from_value(secret["metadata"]["labels"].clone()).unwrap(),
        secret_type: secret["type"].as_str().unwrap().to_owned(),
        release_value: String::from_utf8(inner).unwrap(),
    }
}

#[test]
fn helm_records_decode_and_reencode_byte_for_byte() {
    for v in [1, 2] {
        let c = captured(v);
        let helm_json = decode_to_json_bytes(&c.release_value).unwrap();
        let rls = decode_release(&c.release_value).unwrap();
        assert_eq!(
            String::from_utf8(to_json(&rls).unwrap()).unwrap(),
            String::from_utf8(helm_json.clone()).unwrap(),
            "v{v}: our JSON differs from helm's"
        );
        let ours = encode_release(&rls).unwrap();
        let back = decode_to_json_bytes(&ours).unwrap();
        let a: Value = serde_json::from_slice(&back).unwrap();
        let b: Value = serde_json::from_slice(&helm_json).unwrap();
        assert_eq!(a, b);
        assert_eq!(decode_release(&ours).unwrap(), rls);
    }
}

#[test]
fn helm_records_have_the_expected_shape_and_secret_metadata() {
    let v1 = captured(1);
    let v2 = captured(2);
    let r1 = decode_release(&v1.release_value).unwrap();
    let r2 = decode_release(&v2.release_value).unwrap();
    assert_eq!(v1.name, "sh.helm.release.v1.relfix.v1");
    assert_eq!(v2.secret_type, "helm.sh/release.v1");
    assert_eq!(r1.info.as_ref().unwrap().status, Some(Status::Superseded));
    assert_eq!(r2.info.as_ref().unwrap().status, Some(Status::Deployed));
    assert_eq!(
        r2.info.as_ref().unwrap().description,
        "upgrade <with> & html"
    );
    assert!(
        r2.info
            .as_ref()
            .unwrap()
            .notes
            .contains("<installed> & ready.")
    );
    assert_eq!(r2.version, 2);
    assert_eq!(r2.namespace, "relfix");
    assert_eq!(r2.apply_method, "ssa");
    assert_eq!(r2.config["replicas"].as_f64(), Some(3.0));
    // `n` is a YAML 1.1 bool: helm stored the key as "false".
    assert!(r2.config["extra"]["false"].is_f64());
    let test = r2
        .hooks
        .iter()
        .find(|h| h.events == vec![HookEvent::Test])
        .unwrap();
    assert_eq!(test.last_run.phase, Some(HookPhase::Succeeded));
    assert!(!test.last_run.started_at.is_zero() && !test.last_run.completed_at.is_zero());
    let pre = r2.hooks.iter().find(|h| h.weight == -5).unwrap();
    assert_eq!(
        pre.events,
        vec![HookEvent::PreInstall, HookEvent::PreUpgrade]
    );
    // The v1 record carries the user label; system labels are set by helm.
    assert_eq!(v1.labels["team"], "payments");
    // An Update rebuilds the labels: createdAt is gone, modifiedAt is set.
    assert!(!v1.labels.contains_key("createdAt") && v1.labels.contains_key("modifiedAt"));
    assert_eq!(v2.labels["status"], "deployed");
    // Our labels for the same record: identical except the timestamps we are given.
    let mut with_labels: Release = r1.clone();
    with_labels.labels = filter_system_labels(&v1.labels);
    let at: i64 = v1.labels["modifiedAt"].parse().unwrap();
    let ours = secret_for(&with_labels, StorageOp::Update { at }).unwrap();
    assert_eq!(ours.labels, v1.labels);
    assert_eq!(ours.name, v1.name);
}

#[test]
fn stored_chart_converts_back_to_the_same_record() {
    let rls = decode_release(&captured(2).release_value).unwrap();
    let stored = rls.chart.unwrap();
    let chart = flotilla_chart::Chart::from(&stored);
    assert!(chart.dependencies.is_empty());
    assert_eq!(chart.name(), "relfix");
    assert_eq!(RecordChart::from(&chart), stored);
}

fn zero_modtimes(c: &mut RecordChart) {
    c.modtime = GoTime::ZERO;
    c.schemamodtime = GoTime::ZERO;
    for f in c
        .templates
        .iter_mut()
        .flatten()
        .chain(c.files.iter_mut().flatten())
    {
        f.modtime = GoTime::ZERO;
    }
}

#[test]
fn stored_chart_matches_the_chart_we_load_and_process() {
    let c2 = captured(2);
    let rls = decode_release(&c2.release_value).unwrap();
    let mut chart = flotilla_chart::load_dir(&fixture().join("chart")).unwrap();
    let mut warnings = Vec::new();
    process_dependencies(&mut chart, &rls.config, &mut warnings).unwrap();
    let mut ours = RecordChart::from(&chart);
    let mut theirs = rls.chart.clone().unwrap();
    zero_modtimes(&mut ours);
    zero_modtimes(&mut theirs);
    assert_eq!(
        String::from_utf8(flotilla_yaml::gojson::to_vec(&ours).unwrap()).unwrap(),
        String::from_utf8(flotilla_yaml::gojson::to_vec(&theirs).unwrap()).unwrap()
    );
}
