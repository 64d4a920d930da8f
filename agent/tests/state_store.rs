//! The plan store (`flotilla_agent::reconcile::state`) against a real local cluster:
//! round trips, names that collided under the old scheme, writes that change nothing,
//! optimistic concurrency between two stores, states too large for a Secret, Secrets that
//! do not decode, and deletion. Each test starts its own cluster.

use flotilla_agent::reconcile::state::{
    OBJECT_ANNOTATION, PersistedState, STATE_LABEL, STATE_SECRET_TYPE, StateError, StateStore,
    secret_name,
};
use flotilla_core::agent::{DeleteRequest, ObjectKey};
use flotilla_core::ids::{ChartDigest, PlanRevision};
use flotilla_core::plan::{ChartArtifact, ReleasePlan};
use flotilla_core::spec::HelmRelease;
use flotilla_core::status::HelmReleaseStatus;
use flotilla_tests::{Cluster, ClusterOptions};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The agent namespace of these tests.
const AGENT_NS: &str = "default";

async fn start(name: &str) -> anyhow::Result<(Cluster, kube::Client, Api<Secret>)> {
    let cluster = Cluster::start(ClusterOptions::named(name)).await?;
    let client = cluster.client().await?;
    let secrets = Api::namespaced(client.clone(), AGENT_NS);
    Ok((cluster, client, secrets))
}

/// The plan of HelmRelease `namespace/name` with `values`.
fn plan(namespace: &str, name: &str, values: Value) -> ReleasePlan {
    let hr = HelmRelease::from_value(json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {
            "interval": "5m",
            "chart": {"spec": {"chart": "demo", "sourceRef": {"kind": "HelmRepository", "name": "demo"}}},
        }
    }))
    .expect("a valid HelmRelease");
    let chart = ChartArtifact {
        name: "demo".into(),
        version: "1.0.0".into(),
        app_version: None,
        digest: ChartDigest::of_bytes(b"demo"),
        oci_digest: None,
    };
    ReleasePlan::from_helm_release(&hr, PlanRevision::FIRST, chart, values).expect("a plan")
}

fn status(observed_generation: i64) -> HelmReleaseStatus {
    HelmReleaseStatus {
        observed_generation,
        ..HelmReleaseStatus::default()
    }
}

fn state(namespace: &str, name: &str, values: Value) -> PersistedState {
    PersistedState {
        plan: plan(namespace, name, values),
        status: status(1),
        seq: 0,
        deleting: None,
    }
}

fn key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        namespace: namespace.parse().expect("a namespace"),
        name: name.parse().expect("an object name"),
    }
}

/// The `resourceVersion` of a HelmRelease's state Secret, `None` when there is none.
async fn resource_version(
    secrets: &Api<Secret>,
    object: &ObjectKey,
) -> anyhow::Result<Option<String>> {
    Ok(secrets
        .get_opt(&secret_name(object))
        .await?
        .map(|s| s.metadata.resource_version.expect("a resourceVersion")))
}

/// `len` characters of `[A-Za-z0-9_-]` from a xorshift generator: all but incompressible.
fn noise(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(ALPHABET[(x % 64) as usize])
        })
        .collect()
}

#[tokio::test]
async fn states_round_trip_through_save_load_list_and_delete_and_colliding_names_stay_apart()
-> anyhow::Result<()> {
    let (_cluster, client, secrets) = start("state-round-trip").await?;
    let store = StateStore::new(client.clone(), AGENT_NS);
    assert_eq!(store.namespace(), AGENT_NS);

    // `a-b/c` and `a/b-c` were both `flotilla-release-a-b-c`.
    let first = state("a-b", "c", json!({"who": "a-b/c"}));
    let second = state("a", "b-c", json!({"who": "a/b-c"}));
    // A name longer than a label value, and the longest name there is.
    let long = state("apps", &"l".repeat(100), json!({"who": "long"}));
    let longest_name = format!("{}.{}", "x".repeat(126), "y".repeat(126));
    let longest = state(&"n".repeat(63), &longest_name, json!({"who": "longest"}));
    let all = [&first, &second, &long, &longest];

    for s in all {
        store.save(&s.plan, &s.status).await?;
    }
    let fresh = StateStore::new(client.clone(), AGENT_NS);
    for s in all {
        let object = s.plan.object.key();
        let loaded = fresh.load(&object).await?.expect("a state");
        assert_eq!(&loaded, s, "{object}");
        let secret = secrets.get(&secret_name(&object)).await?;
        assert_eq!(secret.type_.as_deref(), Some(STATE_SECRET_TYPE));
        let annotations = secret.metadata.annotations.expect("annotations");
        assert_eq!(annotations[OBJECT_ANNOTATION], object.to_string());
        assert_eq!(secret.metadata.labels.expect("labels")[STATE_LABEL], "true");
    }
    assert_ne!(
        secret_name(&first.plan.object.key()),
        secret_name(&second.plan.object.key())
    );

    // `save` keeps the stored seq and deletion; `put` writes them.
    let deleting = DeleteRequest {
        object: first.plan.object.key(),
        revision: PlanRevision::FIRST,
        uninstall: None,
    };
    let put = PersistedState {
        seq: 41,
        deleting: Some(deleting.clone()),
        ..first.clone()
    };
    store.put(&put).await?;
    store.save(&first.plan, &status(2)).await?;
    let resumed = StateStore::new(client.clone(), AGENT_NS);
    let (mut listed, errors) = resumed.list().await?;
    assert!(errors.is_empty(), "{errors:?}");
    listed.sort_by_key(|s| s.plan.object.key());
    let mut expected = vec![
        PersistedState {
            status: status(2),
            seq: 41,
            deleting: Some(deleting),
            ..first.clone()
        },
        second.clone(),
        long.clone(),
        longest.clone(),
    ];
    expected.sort_by_key(|s| s.plan.object.key());
    assert_eq!(listed, expected);

    // Deleting one leaves the one whose name collided before.
    resumed.delete(&first.plan.object.key()).await?;
    assert!(
        secrets
            .get_opt(&secret_name(&first.plan.object.key()))
            .await?
            .is_none()
    );
    assert!(store.load(&first.plan.object.key()).await?.is_none());
    assert_eq!(
        store.load(&second.plan.object.key()).await?.as_ref(),
        Some(&second)
    );
    let (listed, _) = store.list().await?;
    assert_eq!(listed.len(), 3);
    // Deleting what is gone is done.
    store.delete(&first.plan.object.key()).await?;
    Ok(())
}

/// Changes the Secret behind the store's back (an annotation): its `resourceVersion`
/// moves, so a write with the one the store remembers would be refused.
async fn touch(secrets: &Api<Secret>, object: &ObjectKey, n: u32) -> anyhow::Result<String> {
    let patch = json!({"metadata": {"annotations": {"example.com/touched": n.to_string()}}});
    let touched = secrets
        .patch(
            &secret_name(object),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(touched
        .metadata
        .resource_version
        .expect("a resourceVersion"))
}

#[tokio::test]
async fn a_write_that_changes_nothing_makes_no_api_call() -> anyhow::Result<()> {
    // The API server itself does not bump the resourceVersion of an update that changes
    // nothing, so each no-op below follows a change behind the store's back: a request
    // with the resourceVersion the store remembers would be refused as a conflict.
    let (_cluster, client, secrets) = start("state-noop").await?;
    let store = StateStore::new(client.clone(), AGENT_NS);
    let s = state("default", "demo", json!({"replicas": 1}));
    let object = s.plan.object.key();
    store.save(&s.plan, &s.status).await?;
    let written = resource_version(&secrets, &object).await?.expect("written");

    let touched = touch(&secrets, &object, 1).await?;
    assert_ne!(touched, written);
    store.save(&s.plan, &s.status).await?;
    store.put(&s).await?;
    assert_eq!(
        resource_version(&secrets, &object).await?.as_ref(),
        Some(&touched),
        "the same state is not written again"
    );

    // After a restart: read, then the same write again is skipped too.
    let restarted = StateStore::new(client.clone(), AGENT_NS);
    restarted.load(&object).await?.expect("a state");
    let touched = touch(&secrets, &object, 2).await?;
    restarted.save(&s.plan, &s.status).await?;
    assert_eq!(
        resource_version(&secrets, &object).await?.as_ref(),
        Some(&touched)
    );

    // A change is written: refused while the store's read is stale, which shows the
    // no-ops above made no request.
    assert!(matches!(
        restarted.save(&s.plan, &status(5)).await,
        Err(StateError::Conflict { .. })
    ));
    restarted.load(&object).await?.expect("a state");
    restarted.save(&s.plan, &status(5)).await?;
    let changed = resource_version(&secrets, &object).await?.expect("written");
    assert_ne!(changed, touched);
    assert_eq!(
        StateStore::new(client, AGENT_NS)
            .load(&object)
            .await?
            .expect("a state")
            .status,
        status(5)
    );
    Ok(())
}

#[tokio::test]
async fn a_write_over_a_state_another_store_changed_since_is_a_conflict_until_read_again()
-> anyhow::Result<()> {
    let (_cluster, client, secrets) = start("state-conflict").await?;
    let first = StateStore::new(client.clone(), AGENT_NS);
    let second = StateStore::new(client.clone(), AGENT_NS);
    let s = state("default", "demo", json!({"replicas": 1}));
    let object = s.plan.object.key();
    first.save(&s.plan, &s.status).await?;

    first.load(&object).await?.expect("a state");
    second.load(&object).await?.expect("a state");
    second.save(&s.plan, &status(2)).await?;
    let seconds = resource_version(&secrets, &object).await?;

    let err = first
        .save(&s.plan, &status(3))
        .await
        .expect_err("the first store's read is stale");
    assert!(matches!(err, StateError::Conflict { .. }), "{err}");
    assert_eq!(err.kind(), "state_conflict");
    assert!(err.is_transient());
    let message = err.to_string();
    assert!(
        message.contains("default/demo") && message.contains(&secret_name(&object)),
        "{message}"
    );
    assert_eq!(
        resource_version(&secrets, &object).await?,
        seconds,
        "nothing written"
    );
    // Without a new read, it stays refused.
    assert!(matches!(
        first
            .put(&PersistedState {
                status: status(3),
                ..s.clone()
            })
            .await,
        Err(StateError::Conflict { .. })
    ));

    let read = first.load(&object).await?.expect("a state");
    assert_eq!(read.status, status(2), "the second store's write");
    first.save(&s.plan, &status(3)).await?;
    assert_eq!(
        StateStore::new(client.clone(), AGENT_NS)
            .load(&object)
            .await?
            .expect("a state")
            .status,
        status(3)
    );

    // A delete after another store's write is refused too, then done after a read.
    let err = second
        .delete(&object)
        .await
        .expect_err("the second store's read is stale");
    assert!(matches!(err, StateError::Conflict { .. }), "{err}");
    assert!(resource_version(&secrets, &object).await?.is_some());
    second.load(&object).await?.expect("a state");
    second.delete(&object).await?;
    assert!(resource_version(&secrets, &object).await?.is_none());

    // A store that still remembers the deleted Secret: its write is a conflict, and after
    // a read (nothing there) it creates the Secret again.
    assert!(matches!(
        first.save(&s.plan, &status(4)).await,
        Err(StateError::Conflict { .. })
    ));
    assert!(first.load(&object).await?.is_none());
    first.save(&s.plan, &status(4)).await?;
    assert!(resource_version(&secrets, &object).await?.is_some());
    Ok(())
}

#[tokio::test]
async fn a_state_too_large_for_a_secret_is_refused_and_nothing_is_written() -> anyhow::Result<()> {
    let (_cluster, client, secrets) = start("state-too-large").await?;
    let store = StateStore::new(client.clone(), AGENT_NS);
    let big = state("default", "big", json!({"blob": noise(2 * 1024 * 1024)}));
    let object = big.plan.object.key();

    let err = store.check_size(&big).expect_err("too large");
    assert!(
        matches!(&err, StateError::TooLarge { object, .. } if object == "default/big"),
        "{err}"
    );
    assert_eq!(err.kind(), "state_too_large");
    assert!(!err.is_transient());
    let message = err.to_string();
    assert!(
        message.starts_with("HelmRelease default/big: state is 1.")
            && message.ends_with("MiB compressed, more than the 1008 KiB a Secret holds"),
        "{message}"
    );

    for result in [
        store.put(&big).await,
        store.save(&big.plan, &big.status).await,
    ] {
        assert!(
            matches!(result, Err(StateError::TooLarge { .. })),
            "{result:?}"
        );
    }
    assert!(resource_version(&secrets, &object).await?.is_none());

    // Over a working state, the working one stays.
    let small = state("default", "big", json!({"blob": "small"}));
    store.check_size(&small)?;
    store.put(&small).await?;
    let working = resource_version(&secrets, &object).await?;
    assert!(matches!(
        store.save(&big.plan, &big.status).await,
        Err(StateError::TooLarge { .. })
    ));
    assert_eq!(resource_version(&secrets, &object).await?, working);
    assert_eq!(store.load(&object).await?.as_ref(), Some(&small));
    Ok(())
}

#[tokio::test]
async fn list_reports_secrets_that_do_not_decode_and_loads_the_others() -> anyhow::Result<()> {
    let (_cluster, client, secrets) = start("state-garbage").await?;
    let store = StateStore::new(client.clone(), AGENT_NS);
    let good = [
        state("default", "one", json!({})),
        state("apps", "two", json!({"x": 1})),
    ];
    for s in &good {
        store.put(s).await?;
    }
    let garbage = |name: &str, data: Vec<(&str, &[u8])>| Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(STATE_LABEL.to_owned(), "true".to_owned())].into()),
            annotations: Some([(OBJECT_ANNOTATION.to_owned(), "default/gone".to_owned())].into()),
            ..ObjectMeta::default()
        },
        type_: Some(STATE_SECRET_TYPE.to_owned()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_owned(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Secret::default()
    };
    let pp = PostParams::default();
    secrets
        .create(
            &pp,
            &garbage(
                "flotilla-release-garbage",
                vec![("format", b"1"), ("state", b"\x1f\x8b not really gzip")],
            ),
        )
        .await?;
    secrets
        .create(&pp, &garbage("flotilla-release-empty", vec![]))
        .await?;
    // A Secret without the label is not the store's.
    let mut unlabelled = garbage("flotilla-release-unlabelled", vec![("state", b"x")]);
    unlabelled.metadata.labels = None;
    secrets.create(&pp, &unlabelled).await?;

    let (mut states, errors) = StateStore::new(client.clone(), AGENT_NS).list().await?;
    states.sort_by_key(|s| s.plan.object.key());
    let mut expected = good.to_vec();
    expected.sort_by_key(|s| s.plan.object.key());
    assert_eq!(states, expected);
    let mut messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    messages.sort();
    assert_eq!(
        messages,
        [
            "HelmRelease default/gone: state Secret default/flotilla-release-empty does not decode",
            "HelmRelease default/gone: state Secret default/flotilla-release-garbage does not decode",
        ]
    );
    assert!(
        errors
            .iter()
            .all(|e| e.kind() == "state_decode" && !e.is_transient())
    );
    let causes: Vec<String> = errors
        .iter()
        .map(|e| {
            std::error::Error::source(e)
                .map(ToString::to_string)
                .unwrap_or_default()
        })
        .collect();
    assert!(
        causes.iter().any(|c| c == "no data key \"format\"")
            && causes.iter().any(|c| c == "data key \"state\" is not gzip"),
        "{causes:?}"
    );

    // A state Secret under a name its plan does not give is refused by list.
    let mut copied = secrets
        .get(&secret_name(&good[0].plan.object.key()))
        .await?;
    copied.metadata = ObjectMeta {
        name: Some("flotilla-release-copied".to_owned()),
        labels: copied.metadata.labels.clone(),
        annotations: copied.metadata.annotations.clone(),
        ..ObjectMeta::default()
    };
    secrets.create(&pp, &copied).await?;
    let (states, errors) = store.list().await?;
    assert_eq!(states.len(), 2);
    assert_eq!(errors.len(), 3);
    assert!(
        errors.iter().any(|e| matches!(
            e,
            StateError::Mismatch { secret, found, .. }
                if secret == "flotilla-release-copied" && found == "default/one"
        )),
        "{errors:?}"
    );

    // A Secret that does not decode under a HelmRelease's own name: load and save say
    // so, and a whole new state replaces it.
    let one = key("default", "one");
    let mut broken = secrets.get(&secret_name(&one)).await?;
    broken
        .data
        .get_or_insert_default()
        .insert("state".to_owned(), ByteString(b"broken".to_vec()));
    secrets.replace(&secret_name(&one), &pp, &broken).await?;
    let reader = StateStore::new(client.clone(), AGENT_NS);
    let err = reader.load(&one).await.expect_err("does not decode");
    assert_eq!(
        err.to_string(),
        format!(
            "HelmRelease default/one: state Secret default/{} does not decode",
            secret_name(&one)
        )
    );
    assert!(
        matches!(
            reader.save(&good[0].plan, &good[0].status).await,
            Err(StateError::Decode { .. })
        ),
        "save keeps a seq it cannot read: it does not replace the Secret"
    );
    reader.put(&good[0]).await?;
    assert_eq!(reader.load(&one).await?.as_ref(), Some(&good[0]));
    Ok(())
}
