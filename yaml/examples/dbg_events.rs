fn main() {
    let src = std::env::args()
        .nth(1)
        .unwrap_or_default()
        .replace("\\n", "\n");
    for ev in saphyr_parser::Parser::new_from_str(&src) {
        match ev {
            Ok((e, span)) => println!(
                "{e:?} {}..{} (line {} col {})",
                span.start.index(),
                span.end.index(),
                span.start.line(),
                span.start.col()
            ),
            Err(e) => {
                println!("ERR {e:?}");
                break;
            }
        }
    }
    println!("chars {}", src.chars().count());
}
