"""bench/compare_memory.py's table, from hand-made measurements (its real run takes minutes: the
numbers are in bench/RESULTS.md, "Memory of compare's paired bootstrap")."""

from docpages import bench_script


def test_the_bench_table_is_rendered_from_the_measurements():
    cm = bench_script("compare_memory")
    case = {"items": 20_000, "blocks": 39, "digest": "d"}
    results = [
        case | {"way": "before", "seconds": 9.0, "traced_peak_bytes": 965.4e6},
        case | {"way": "now", "seconds": 9.5, "traced_peak_bytes": 30.2e6},
        case | {"way": "before", "seconds": 6.5, "rss_before_bytes": 150e6, "peak_rss_bytes": 1250e6},
        case | {"way": "now", "seconds": 7.25, "rss_before_bytes": 150e6, "peak_rss_bytes": 190e6},
    ]
    assert cm.render_rows(results) == [["20,000", "39", "965 MB", "30 MB", "1,100 MB", "40 MB", "6.5 / 7.2", "yes"]]
    results[1] = results[1] | {"digest": "e"}
    assert cm.render_rows(results)[0][-1] == "NO"
