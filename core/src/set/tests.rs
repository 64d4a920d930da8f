use super::*;

fn spec(json: serde_json::Value) -> HelmReleaseSetSpec {
    serde_json::from_value(json).unwrap()
}

fn ingress() -> serde_json::Value {
    serde_json::json!({
        "clusterSelector": {"matchLabels": {"tier": "prod"}},
        "template": {
            "metadata": {"labels": {"team": "edge"}},
            "spec": {
                "interval": "10m",
                "chart": {"spec": {"chart": "ingress-nginx", "version": "4.11.*",
                    "sourceRef": {"kind": "HelmRepository", "name": "ingress"}}},
                "values": {"controller": {"replicaCount": 2, "kind": "Deployment"}},
            },
        },
        "valuesTemplate": "controller:\n  region: {{ .ClusterLabels.region }}\n",
        "rollout": {"waves": [{"name": "canary", "maxConcurrency": 1, "gate": "Manual"},
                              {"name": "eu", "maxConcurrency": "25%", "minSoakTime": "10m"}]},
    })
}

fn info(name: &str, labels: &[(&str, &str)]) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

#[test]
fn child_names_are_set_dash_cluster_or_hashed_dns_labels() {
    assert_eq!(child_name("ingress", "edge-1"), "ingress-edge-1");
    let long = child_name("ingress", &"c".repeat(70));
    assert_eq!(long.len(), 63);
    assert!(long.starts_with("ingress-ccc"), "{long}");
    ids::check_dns1123_label("child", &long).unwrap();
    assert_eq!(
        long,
        child_name("ingress", &"c".repeat(70)),
        "deterministic"
    );
    // A dotted cluster name is not a label: the dots go and a hash keeps it unique.
    let dotted = child_name("ingress", "edge.eu-1");
    ids::check_dns1123_label("child", &dotted).unwrap();
    assert!(dotted.starts_with("ingress-edge-eu-1-"), "{dotted}");
    assert_ne!(dotted, child_name("ingress", "edge-eu-1"));
    // Two long names that cut alike still differ.
    let a = child_name(&"s".repeat(40), &format!("{}a", "c".repeat(40)));
    let b = child_name(&"s".repeat(40), &format!("{}b", "c".repeat(40)));
    assert_ne!(a, b);
    assert_eq!(a.len(), 63);
}

#[test]
fn the_revision_is_stable_and_ignores_what_does_not_shape_a_child() {
    let base = spec(ingress());
    let r = base.revision();
    assert_eq!(r.as_str().len(), SetRevision::LEN);
    assert_eq!(spec(ingress()).revision(), r);
    // Selector and rollout settings are not part of it.
    let mut other = ingress();
    other["clusterSelector"] = serde_json::json!({});
    other["rollout"]["paused"] = true.into();
    other["rollout"]["waves"][0]["approvedRevision"] = r.as_str().into();
    assert_eq!(spec(other).revision(), r);
    // Key order is not either.
    let reordered: HelmReleaseSetSpec =
        serde_json::from_str(&serde_json::to_string(&ingress()).unwrap().replace(
            r#""replicaCount":2,"kind":"Deployment""#,
            r#""kind":"Deployment","replicaCount":2"#,
        ))
        .unwrap();
    assert_eq!(reordered.revision(), r);
    // Values, the values template and customizations are.
    for (path, value) in [
        (
            "/template/spec/values/controller/replicaCount",
            serde_json::json!(3),
        ),
        ("/valuesTemplate", serde_json::json!("a: b\n")),
        ("/template/metadata/labels/team", serde_json::json!("core")),
    ] {
        let mut changed = ingress();
        *changed.pointer_mut(path).unwrap() = value;
        assert_ne!(spec(changed).revision(), r, "{path}");
    }
    let mut customized = ingress();
    customized["targetCustomizations"] = serde_json::json!([{"name": "gpu", "clusterSelector": {"matchLabels": {"gpu": "true"}}, "suspend": true}]);
    assert_ne!(spec(customized).revision(), r);
    assert_eq!(
        r.controller_revision_name("ingress"),
        format!("ingress-{r}")
    );
}

#[test]
fn clusters_are_selected_by_labels_or_names_minus_exclusions_sorted() {
    let fleet = [
        info("z-prod", &[("tier", "prod")]),
        info("a-prod", &[("tier", "prod")]),
        info("dev", &[("tier", "dev")]),
        info("lab", &[]),
        info("b-prod", &[("tier", "prod")]),
    ];
    let mut s = spec(ingress());
    s.cluster_names = vec!["lab".into(), "missing".into()];
    s.exclude_clusters = vec!["b-prod".into()];
    let names: Vec<&str> = select_clusters(&s, &fleet)
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["a-prod", "lab", "z-prod"]);
    s.cluster_selector = None;
    let names: Vec<&str> = select_clusters(&s, &fleet)
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["lab"], "no selector: names only");
    s.cluster_selector = Some(LabelSelector::default());
    assert_eq!(
        select_clusters(&s, &fleet).len(),
        4,
        "{{}} selects all, minus the excluded"
    );
}

#[test]
fn the_first_matching_customization_wins() {
    let s = spec(serde_json::json!({
        "template": {"spec": {"interval": "5m"}},
        "targetCustomizations": [
            {"name": "gpu", "clusterSelector": {"matchLabels": {"gpu": "true"}}, "chartVersion": "2.0.0"},
            {"name": "eu", "clusterSelector": {"matchLabels": {"region": "eu"}}, "doNotDeploy": true},
            {"name": "all", "clusterSelector": {}},
        ],
    }));
    let pick = |labels: &[(&str, &str)]| {
        TargetCustomization::first_match(&s.target_customizations, &info("x", labels).labels)
            .map(|c| c.name.as_str())
    };
    assert_eq!(pick(&[("gpu", "true"), ("region", "eu")]), Some("gpu"));
    assert_eq!(pick(&[("region", "eu")]), Some("eu"));
    assert_eq!(pick(&[]), Some("all"));
}

#[test]
fn the_child_spec_gets_its_cluster_values_and_customization() {
    let mut s = spec(ingress());
    s.target_customizations = vec![TargetCustomization {
        name: "gpu".into(),
        cluster_selector: LabelSelector::default(),
        values: Some(serde_json::json!({"controller": {"replicaCount": 5}})),
        chart_version: Some("4.12.0".into()),
        suspend: Some(true),
        do_not_deploy: false,
    }];
    let rendered = serde_json::json!({"controller": {"region": "eu", "replicaCount": 3}});
    let child = child_spec(
        &s,
        "ingress",
        "edge-1",
        s.target_customizations.first(),
        rendered.as_object(),
    );
    assert_eq!(child.cluster_ref.as_ref().unwrap().name, "edge-1");
    assert_eq!(child.release_name.as_deref(), Some("ingress"));
    assert_eq!(
        child.values,
        Some(
            serde_json::json!({"controller": {"kind": "Deployment", "region": "eu", "replicaCount": 5}})
        )
    );
    assert_eq!(
        child.chart.as_ref().unwrap().spec.version.as_deref(),
        Some("4.12.0")
    );
    assert!(child.suspend);
    let plain = child_spec(&s, "ingress", "edge-1", None, None);
    assert_eq!(plain.values, s.template.spec.values);
    assert!(!plain.suspend);
}

#[test]
fn int_or_percent_reads_counts_and_percentages() {
    for (json, want) in [
        (serde_json::json!(3), IntOrPercent::Count(3)),
        (serde_json::json!("25%"), IntOrPercent::Percent(25)),
        (serde_json::json!("7"), IntOrPercent::Count(7)),
        (serde_json::json!("100%"), IntOrPercent::Percent(100)),
    ] {
        let got: IntOrPercent = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(got, want, "{json}");
    }
    assert_eq!(
        serde_json::to_value(IntOrPercent::Percent(25)).unwrap(),
        "25%"
    );
    assert_eq!(serde_json::to_value(IntOrPercent::Count(2)).unwrap(), 2);
    for bad in [
        serde_json::json!(-1),
        serde_json::json!("101%"),
        serde_json::json!("x"),
        serde_json::json!(1.5),
    ] {
        let err = serde_json::from_value::<IntOrPercent>(bad.clone())
            .unwrap_err()
            .to_string();
        assert!(!err.is_empty(), "{bad}");
    }
    assert_eq!(IntOrPercent::Percent(10).of(25), 2);
    assert_eq!(IntOrPercent::Percent(10).of(5), 0);
}

#[test]
fn validation_names_the_object_and_field() {
    let s = spec(ingress());
    s.validate("fleet/ingress").unwrap();
    let cases = [
        (
            "/clusterSelector",
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            "HelmReleaseSet fleet/ingress: spec.clusterSelector.matchExpressions[0].values: must be specified",
        ),
        (
            "/rollout/waves/1/name",
            serde_json::json!("canary"),
            "spec.rollout.waves[1].name: wave \"canary\" is declared twice",
        ),
        (
            "/rollout/waves/1/name",
            serde_json::json!("unmatched"),
            "spec.rollout.waves[1].name: \"unmatched\" is reserved",
        ),
        (
            "/rollout/waves/0/maxConcurrency",
            serde_json::json!(0),
            "spec.rollout.waves[0].maxConcurrency: must be at least 1",
        ),
        (
            "/template/spec/clusterRef",
            serde_json::json!({"name": "x"}),
            "spec.template.spec.clusterRef: must not be set",
        ),
        (
            "/excludeClusters",
            serde_json::json!(["Bad_Name"]),
            "spec.excludeClusters[0]: cluster name \"Bad_Name\"",
        ),
    ];
    for (path, value, want) in cases {
        let mut json = ingress();
        let (parent, key) = path.rsplit_once('/').unwrap();
        let target = json.pointer_mut(parent).unwrap();
        match target {
            serde_json::Value::Array(a) => a[key.parse::<usize>().unwrap()] = value,
            other => {
                other[key] = value;
            }
        }
        let err = spec(json)
            .validate("fleet/ingress")
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{path}: {err}");
    }
}

#[test]
fn a_set_reads_and_writes_its_json_unchanged() {
    let s = spec(ingress());
    let waves = &s.rollout.as_ref().unwrap().waves;
    assert_eq!(waves[0].max_concurrency, Some(IntOrPercent::Count(1)));
    assert_eq!(waves[1].max_concurrency(), IntOrPercent::Percent(25));
    assert_eq!(waves[0].gate(), GateType::Manual);
    assert_eq!(waves[1].max_failures(), IntOrPercent::Count(0));
    assert_eq!(waves[1].progress_deadline(), DEFAULT_PROGRESS_DEADLINE);
    assert_eq!(s.stop_matching_policy(), StopMatchingPolicy::Uninstall);
    assert_eq!(s.rollout().on_failure(), OnFailure::Pause);
    let mut want = ingress();
    want["template"]["spec"]["interval"] = "10m0s".into();
    want["rollout"]["waves"][1]["minSoakTime"] = "10m0s".into();
    assert_eq!(serde_json::to_value(&s).unwrap(), want);
}
