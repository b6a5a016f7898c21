"""The audit's HTML report and compare mode: self-contained, reproducible, readable in Chromium."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from phisieve.audit.report import compare_reports, render_report
from phisieve.errors import InputError
from tests.audit_sample import RECOVERED_TEXTS, sample_audit

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class _Tags(HTMLParser):
    """Every tag's attributes, in document order, with its offset in the source."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def _png_size(uri: str) -> tuple[int, int]:
    prefix = "data:image/png;base64,"
    assert uri.startswith(prefix), uri[:40]
    data = base64.b64decode(uri[len(prefix) :], validate=True)
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _write_audit(folder: Path, result: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "audit.json").write_text(json.dumps(result), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render_report(sample_audit(), tmp_path_factory.mktemp("report") / "mlm")


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare")
    a = _write_audit(root / "a", sample_audit(0, "mlm"))
    b = _write_audit(root / "b", sample_audit(1, "ppmlm"))
    return compare_reports([a, b / "audit.json"], root / "out")


def test_report_is_self_contained(rendered: Path) -> None:
    page = rendered.read_text(encoding="utf-8")
    assert rendered.name == "index.html"
    assert "http://" not in page and "https://" not in page
    tags = _tags(page)
    for _, attrs in tags:
        for key in ("src", "href"):
            value = (attrs.get(key) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//")), value
            assert not value or value.startswith(("data:image/png;base64,", "#")), value
    assert not any(tag in ("script", "link", "iframe") for tag, _ in tags)
    images = [attrs["src"] for tag, attrs in tags if tag == "img"]
    # ROC (sequence, patient), per-patient CDFs, inversion bars, canary exposure.
    assert len(images) == 5
    for uri in images:
        width, height = _png_size(uri)
        assert width > 0 and height > 0
    assert page.index('id="verdict"') < page.index("<img")
    # Patient level: 110 non-members cannot estimate a TPR at 0.1% FPR.
    assert page.count("not estimable (110 negatives)") == 5
    assert "5.8% <span class='why'>(110 negatives)</span>" in page
    for text in RECOVERED_TEXTS:
        assert text not in page
    assert "This report contains patient identifiers" not in page


def test_identifier_texts_only_when_the_audit_holds_them(tmp_path: Path) -> None:
    result = sample_audit(show_identifiers=True)
    page = render_report(result, tmp_path / "shown").read_text(encoding="utf-8")
    for text in RECOVERED_TEXTS:
        assert f"<td>{text}</td>" in page
    assert "This report contains patient identifiers" in page
    for entry in result["identifiers"]["top_recovered"]:
        del entry["text"]
    page = render_report(result, tmp_path / "hidden").read_text(encoding="utf-8")
    for text in RECOVERED_TEXTS:
        assert text not in page
    assert "<th>Category</th><th>Length (characters)</th><th>Occurrences</th><th>Patients</th>" in (
        page
    )


def test_report_values_nulls_and_escaping(tmp_path: Path) -> None:
    result = sample_audit()
    result["model"]["label"] = "<script>alert('x')</script>"
    result["notes"].append('a "quoted" <b>note</b> & more')
    loss = result["membership"]["patient"]["loss"]
    loss["auc"], loss["auc_ci"] = 0.6123, [0.55, 0.67]
    loss["pl"] = {"threshold": -2.0, "tpr": 0.5, "fpr": 0.25, "pl": 0.25}
    result["reference_model"] = None
    for m in result["memorisation"].values():
        m["gain"] = m["gain_ci"] = None
    result["memorisation"]["all"]["gap"] = 0.4567
    result["memorisation"]["all"]["gap_ci"] = [0.1, 0.8]
    result["identifiers"]["members"]["overall"]["privacy"] = 0.9375
    result["canaries"] = None
    page = render_report(result, tmp_path).read_text(encoding="utf-8")

    assert "<script" not in page
    assert "Privacy audit: &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "a &quot;quoted&quot; &lt;b&gt;note&lt;/b&gt; &amp; more" in page
    assert '<td class="num">0.612 [0.550, 0.670]</td>' in page
    assert "0.250 <span class='why'>(TPR 50.0%, FPR 25.0%)</span>" in page
    assert (
        page.count('<span class="null">—</span> <span class="why">(needs --reference-model)</span>')
        == 3
    )
    assert '<td class="num">0.457 [0.100, 0.800]</td>' in page
    assert '<td class="num"><strong>93.8%</strong></td>' in page
    assert "Not run: free generation applies to causal language models only" in page
    assert "Not run: no canaries were inserted in the training data." in page
    # The verdict's null value.
    assert '<span class="null">—</span> <span class="why">(not estimable)</span>' in page
    assert len(re.findall(r"<img ", page)) == 4


def test_causal_report(tmp_path: Path) -> None:
    page = render_report(sample_audit(2, "clm", causal=True), tmp_path).read_text(encoding="utf-8")
    assert ('<td class="num">200</td><td class="num">12,800</td><td class="num">') in page
    assert "Not run: model inversion ranks names in masked slots" in page
    assert len(re.findall(r"<img ", page)) == 4


def test_rerender_is_byte_identical(rendered: Path, tmp_path: Path) -> None:
    again = render_report(sample_audit(), tmp_path)
    assert again.read_bytes() == rendered.read_bytes()


def test_import_is_cheap() -> None:
    code = (
        "import sys, phisieve.audit.report; "
        "print(sorted(m for m in ('matplotlib', 'sklearn', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_compare_reports(compared: Path) -> None:
    assert compared == compared.parent / "index.html"
    summary = json.loads((compared.parent / "compare.json").read_text(encoding="utf-8"))
    assert summary["schema"] == "phisieve-audit-compare/1"
    models = summary["models"]
    assert [m["label"] for m in models] == ["mlm", "ppmlm"]
    assert [m["objective"] for m in models] == ["mlm", "ppmlm"]
    for m, (seed, label) in zip(models, ((0, "mlm"), (1, "ppmlm")), strict=True):
        sample = sample_audit(seed, label)
        assert m["privacy_overall"] == sample["identifiers"]["members"]["overall"]["privacy"]
        assert m["utility_top1"] == sample["identifiers"]["utility"]["top1"]
        assert m["patient_loss_auc_ci"] == sample["membership"]["patient"]["loss"]["auc_ci"]
        assert m["gain_numeric"] is None
        assert m["inversion_top100"] == sample["inversion"]["model"]["top100"]
        exposures = [c["exposure"] for c in sample["canaries"]["canaries"]]
        assert m["canary_mean_exposure"] == pytest.approx(sum(exposures) / len(exposures))
    page = compared.read_text(encoding="utf-8")
    assert "<th>mlm</th><th>ppmlm</th>" in page
    assert "http://" not in page and "https://" not in page
    images = [a["src"] for tag, a in _tags(page) if tag == "img"]
    assert len(images) == 4
    assert all(min(_png_size(uri)) > 0 for uri in images)


def test_compare_refuses_what_is_not_an_audit(tmp_path: Path) -> None:
    good = _write_audit(tmp_path / "good", sample_audit())
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=re.escape(str(empty))):
        compare_reports([good, empty], tmp_path / "out")
    wrong = sample_audit()
    wrong["schema"] = "phisieve-audit/0"
    other = _write_audit(tmp_path / "other", wrong)
    with pytest.raises(InputError, match=re.escape(str(other / "audit.json"))):
        compare_reports([good, other], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(
            "chromium is not on PATH: `make test` installs Debian's chromium package "
            "(apt-get install chromium); the report test opens the page in it"
        )
    return path


def browser_check(page_path: Path, min_images: int) -> None:
    """Open ``page_path`` in headless Chromium: no console or page errors, at least
    ``min_images`` images, every one loaded with a non-zero size."""
    from playwright.sync_api import sync_playwright

    executable = _chromium()
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable, args=["--no-sandbox"], timeout=60_000
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(30_000)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.goto(page_path.as_uri(), wait_until="load")
            images = page.evaluate(
                "Array.from(document.images).map(i => [i.complete, i.naturalWidth, "
                "i.naturalHeight])"
            )
        finally:
            browser.close()
    assert errors == []
    assert len(images) >= min_images
    assert all(done and w > 0 and h > 0 for done, w, h in images), images


@pytest.mark.parametrize("page_fixture, min_images", [("rendered", 5), ("compared", 4)])
def test_pages_load_in_headless_chromium(
    page_fixture: str, min_images: int, request: pytest.FixtureRequest
) -> None:
    browser_check(request.getfixturevalue(page_fixture), min_images)


def test_compare_reports_shows_dp_and_one_run_bound(tmp_path: Path) -> None:
    dp = sample_audit(2, "ppmlm+dp")
    dp["model"]["dp"] = {"unit": "patient", "epsilon": 7.996, "delta": 0.00023, "steps": 400}
    dp["canaries"]["one_run"] = {"epsilon_lower": 0.0, "why": None}
    plain = sample_audit(3, "mlm")
    plain["canaries"]["one_run"] = {"epsilon_lower": 1.625, "why": None}
    noiseless = sample_audit(4, "ppmlm+dp@inf")
    noiseless["model"]["dp"] = {"unit": "patient", "epsilon": None, "delta": 0.00023}
    folders = [
        _write_audit(tmp_path / k, r) for k, r in (("a", dp), ("b", plain), ("c", noiseless))
    ]
    page = compare_reports(folders, tmp_path / "out").read_text(encoding="utf-8")
    models = json.loads((tmp_path / "out" / "compare.json").read_text(encoding="utf-8"))["models"]
    assert [(m["dp_unit"], m["dp_epsilon"], m["dp_delta"]) for m in models] == [
        ("patient", 7.996, 0.00023),
        (None, None, None),
        ("patient", None, 0.00023),
    ]
    assert [m["epsilon_lower"] for m in models] == [0.0, 1.625, None]
    for m, r in zip(models, (dp, plain, noiseless), strict=True):
        ref = r["membership"]["patient"]["reference"]
        assert (m["patient_calibrated_auc"], m["patient_calibrated_auc_ci"]) == (
            ref["auc"],
            ref["auc_ci"],
        )
    row = re.search(r"<th>DP-SGD: ε per patient</th>(.*?)</tr>", page, re.S)
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    assert [c.strip() for c in cells[:2]] == ["8.00 (δ = 0.00023)", "none"]
    assert "no finite ε" in cells[2]
    row = re.search(r"<th>ε lower bound per patient, one run \(95%\)</th>(.*?)</tr>", page, re.S)
    assert row is not None
    assert [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)][:2] == [
        "0.00",
        "1.62",
    ]
