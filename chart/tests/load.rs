//! Loading archives: an archive made by the real `helm package` loads like the directory it
//! came from; Helm's path-safety and size checks, BOM stripping and error texts.

use std::io::Write;
use std::path::{Path, PathBuf};

use flotilla_chart::{Chart, load, load_archive};

fn fixtures(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A gzipped tar whose entry names are written verbatim (no sanitizing).
fn tgz(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in entries {
        let mut h = tar::Header::new_gnu();
        let raw = &mut h.as_gnu_mut().unwrap().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    let tar = b.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

const CHART_YAML: &[u8] = b"apiVersion: v2\nname: t\nversion: 0.1.0\n";

fn err(entries: &[(&str, &[u8])]) -> String {
    load_archive(&tgz(entries)).unwrap_err().to_string()
}

fn names(files: &[flotilla_chart::File]) -> Vec<String> {
    let mut v: Vec<String> = files.iter().map(|f| f.name.clone()).collect();
    v.sort();
    v
}

fn same_chart(a: &Chart, b: &Chart) {
    assert_eq!(a.metadata, b.metadata);
    assert_eq!(a.values, b.values);
    assert_eq!(names(&a.templates), names(&b.templates));
    for t in &a.templates {
        let u = b.templates.iter().find(|u| u.name == t.name).unwrap();
        assert_eq!(t.data, u.data, "{}", t.name);
    }
    let mut da: Vec<&Chart> = a.dependencies.iter().collect();
    let mut db: Vec<&Chart> = b.dependencies.iter().collect();
    da.sort_by(|x, y| x.name().cmp(y.name()));
    db.sort_by(|x, y| x.name().cmp(y.name()));
    assert_eq!(da.len(), db.len());
    for (x, y) in da.into_iter().zip(db) {
        same_chart(x, y);
    }
}

#[test]
fn helm_packaged_archive_loads_like_its_directory() {
    let dir = flotilla_chart::load_dir(&fixtures("deps").join("chart")).unwrap();
    let tgz = load(&fixtures("archive").join("parent-1.0.0.tgz")).unwrap();
    same_chart(&dir, &tgz);
    // .helmignore is kept in the package and is a plain file there.
    assert!(tgz.files.iter().any(|f| f.name == ".helmignore"));
    assert!(tgz.templates.iter().all(|t| t.mod_time.is_some()));
}

#[test]
fn archive_paths_are_checked_like_helm() {
    assert_eq!(
        err(&[("t/../../etc/x", b"x")]),
        "chart illegally references parent directory"
    );
    assert_eq!(
        err(&[("t//etc/passwd", b"x")]),
        "chart illegally contains absolute paths"
    );
    assert_eq!(
        err(&[("Chart.yaml", CHART_YAML)]),
        "chart illegally contains content outside the base directory: \"Chart.yaml\""
    );
    assert_eq!(
        err(&[("t/C:/x", b"x")]),
        "chart contains illegally named files"
    );
    assert_eq!(err(&[]), "no files in chart archive");
    assert_eq!(
        err(&[("t/values.yaml", b"a: 1\n")]),
        "Chart.yaml file is missing"
    );
    let big = vec![b'a'; 5 * 1024 * 1024 + 1];
    assert_eq!(
        err(&[("t/Chart.yaml", CHART_YAML), ("t/big.txt", &big)]),
        "decompressed chart file \"t/big.txt\" is larger than the maximum file size 5242880"
    );
    assert_eq!(
        err(&[
            ("t/Chart.yaml", CHART_YAML),
            ("t/charts/sub/Chart.yaml", b"name: sub\nversion: 1.0.0\n"),
            ("t/charts/sub/values.yaml", b"a: [\n")
        ]),
        "error unpacking subchart sub in t: cannot load values.yaml: cannot unmarshal yaml document: error converting YAML to JSON: yaml: line 1: did not find expected node content"
    );
    assert_eq!(
        err(&[("t/Chart.yaml", b"apiVersion: v2\nname: t\n")]),
        "validation: chart.metadata.version is required"
    );
}

#[test]
fn backslashes_bom_and_nested_archives_load() {
    let sub = tgz(&[
        (
            "sub/Chart.yaml",
            b"apiVersion: v2\nname: sub\nversion: 1.0.0\n",
        ),
        ("sub/values.yaml", b"\xEF\xBB\xBFs: 1\r\n"),
    ]);
    let top = tgz(&[
        (
            "t\\Chart.yaml",
            b"\xEF\xBB\xBFapiVersion: v2\r\nname: t\r\nversion: 0.1.0\r\n",
        ),
        ("t\\templates\\a.yaml", b"kind: A\r\n"),
        ("t/charts/sub-1.0.0.tgz", &sub),
        ("t/charts/sub-1.0.0.tgz.prov", b"sig"),
        ("t/charts/_skip/Chart.yaml", b"garbage: ["),
        ("t/crds/c.YAML", b"kind: CRD\n"),
    ]);
    let c = load_archive(&top).unwrap();
    assert_eq!(c.name(), "t");
    assert_eq!(c.templates[0].name, "templates/a.yaml");
    assert_eq!(&*c.templates[0].data, b"kind: A\r\n");
    assert_eq!(c.dependencies.len(), 1);
    assert_eq!(c.dependencies[0].values()["s"].as_f64(), Some(1.0));
    assert_eq!(
        names(&c.files),
        vec!["charts/sub-1.0.0.tgz.prov", "crds/c.YAML"]
    );
    assert_eq!(c.crd_files().count(), 1);
}

#[test]
fn non_archives_are_refused_with_helms_message() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("chart.tgz");
    std::fs::write(&p, b"not a gzip").unwrap();
    let e = load(&p).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "file '{}' does not appear to be a gzipped archive; got 'text/plain; charset=utf-8'",
            p.display()
        )
    );
    let y = dir.path().join("values.yaml");
    std::fs::write(&y, b"a: 1").unwrap();
    assert!(
        load(&y)
            .unwrap_err()
            .to_string()
            .ends_with("seems to be a YAML file, but expected a gzipped archive")
    );
}

#[test]
fn directory_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Chart.yaml"),
        b"apiVersion: v2\nname: x\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("values.yaml"), b"a: 1\nb: [\n").unwrap();
    let e = flotilla_chart::load_dir(dir.path())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("cannot load values.yaml: cannot unmarshal yaml document: error converting YAML to JSON: yaml: line"), "{e}");
    std::fs::write(dir.path().join("values.yaml"), b"a: 1\n").unwrap();
    std::fs::write(dir.path().join(".helmignore"), b"a/**/b\n").unwrap();
    let e = flotilla_chart::load_dir(dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with(".helmignore: double-star (**) syntax is not supported"),
        "{e}"
    );
    std::fs::remove_file(dir.path().join(".helmignore")).unwrap();
    std::fs::write(
        dir.path().join("Chart.yaml"),
        b"apiVersion: v2\nname: x\nversion: 1.0.0\ndeprecated: maybe\n",
    )
    .unwrap();
    let e = flotilla_chart::load_dir(dir.path())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "cannot load Chart.yaml: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal string into Go struct field Metadata.deprecated of type bool"
    );
    std::fs::remove_file(dir.path().join("Chart.yaml")).unwrap();
    assert_eq!(
        flotilla_chart::load_dir(dir.path())
            .unwrap_err()
            .to_string(),
        "Chart.yaml file is missing"
    );
}

#[cfg(unix)]
#[test]
fn symlinked_files_are_followed() {
    let dir = tempfile::tempdir().unwrap();
    let real = tempfile::tempdir().unwrap();
    std::fs::write(real.path().join("a.yaml"), b"kind: A\n").unwrap();
    std::fs::write(dir.path().join("Chart.yaml"), CHART_YAML).unwrap();
    std::os::unix::fs::symlink(real.path(), dir.path().join("templates")).unwrap();
    let c = flotilla_chart::load_dir(dir.path()).unwrap();
    assert_eq!(c.templates[0].name, "templates/a.yaml");
}

#[test]
fn cli_loader_dispatches_on_api_version_and_hides_archive_details() {
    let dir = tempfile::tempdir().unwrap();
    let e = load(dir.path()).unwrap_err().to_string();
    assert!(
        e.starts_with("unable to detect chart at ")
            && e.ends_with("Chart.yaml: open ".to_owned().as_str())
            || e.contains("Chart.yaml: no such file or directory"),
        "{e}"
    );
    std::fs::write(
        dir.path().join("Chart.yaml"),
        b"apiVersion: v9\nname: x\nversion: 1.0.0\n",
    )
    .unwrap();
    assert_eq!(
        load(dir.path()).unwrap_err().to_string(),
        "unsupported chart version"
    );
    let bad = dir.path().join("bad.tgz");
    std::fs::write(&bad, tgz(&[("t/../../x", b"x")])).unwrap();
    assert_eq!(
        load(&bad).unwrap_err().to_string(),
        "unable to load chart archive"
    );
    let none = dir.path().join("none.tgz");
    std::fs::write(&none, tgz(&[("t/values.yaml", b"a: 1\n")])).unwrap();
    assert_eq!(
        load(&none).unwrap_err().to_string(),
        "unable to detect chart version, no Chart.yaml found"
    );
}
