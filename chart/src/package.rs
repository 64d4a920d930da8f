//! Chart archives written in memory: the files of a chart (as the loader read them) as a
//! gzipped tar under one top directory, the layout `helm package` writes and
//! [`crate::load_archive`] reads.
//!
//! The archive is deterministic: entries in name order (`Chart.yaml` first, as Helm writes
//! it), no modification times, owners or modes from the file system, and a gzip header
//! without a time. The same files always give the same bytes, so the archive's sha256 is a
//! stable content address for a chart directory.

use std::io::Write as _;

use crate::chart::File;

/// The gzipped tar of `files` (paths relative to the chart root) under `top/`.
pub fn archive(top: &str, files: &[File]) -> std::io::Result<Vec<u8>> {
    let mut sorted: Vec<&File> = files.iter().collect();
    sorted.sort_by(|a, b| {
        (a.name != "Chart.yaml")
            .cmp(&(b.name != "Chart.yaml"))
            .then_with(|| a.name.cmp(&b.name))
    });
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    for file in sorted {
        let mut header = tar::Header::new_gnu();
        header.set_size(file.data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, format!("{top}/{}", file.name), &*file.data)?;
    }
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, data: &str) -> File {
        File {
            name: name.to_owned(),
            data: data.as_bytes().into(),
            mod_time: None,
        }
    }

    #[test]
    fn an_archive_loads_back_as_the_same_chart_and_is_the_same_bytes_every_time() {
        let files = vec![
            file("templates/cm.yaml", "kind: ConfigMap\n"),
            file("Chart.yaml", "apiVersion: v2\nname: demo\nversion: 0.1.0\n"),
            file("values.yaml", "a: 1\n"),
        ];
        let one = archive("demo", &files).unwrap();
        let mut reversed = files.clone();
        reversed.reverse();
        assert_eq!(one, archive("demo", &reversed).unwrap());
        let chart = crate::load_archive(&one).unwrap();
        assert_eq!(chart.metadata.name, "demo");
        assert_eq!(chart.templates.len(), 1);
        assert_eq!(&*chart.templates[0].data, b"kind: ConfigMap\n");
        let names: Vec<String> = crate::load::load_archive_files(&one)
            .unwrap()
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["Chart.yaml", "templates/cm.yaml", "values.yaml"]);
    }
}
