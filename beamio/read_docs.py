"""Domain documents: PDF (pypdfium2), DOCX (python-docx) and Markdown (markdown-it-py), one document per file.

- PDF: the text layer, page by page, pages joined with a blank line; ``meta.page_count``, and
  ``meta.pages_without_text`` for pages with no text layer (scanned pages: no OCR is done). A PDF with no text
  on any page is skipped (``no_text``); a password-protected one is quarantined (``encrypted_pdf``), a file
  pdfium cannot open is quarantined (``unreadable_file``). ``meta.title`` from the document information.
- DOCX: the body in order: paragraphs (headings and list items included) and tables (a row per line, cells
  separated by a tab), blocks joined with a blank line; ``meta.title`` from the core properties. A file that is
  not a readable DOCX is quarantined (``unreadable_file``).
- Markdown: the text without markup (headings, paragraphs, list items, code blocks' content, table cells);
  raw HTML blocks are left out; ``meta.title`` from a YAML front matter's ``title`` when there is one.

A document with no text at all is skipped (``empty``/``no_text``) with a reason.
"""
from __future__ import annotations

import io
import threading
from typing import Iterator

import yaml

from beamio.config_base import InputConfig
from beamio.records import InputFile, Quarantined, Skipped, doc_id
from beamio.read_web import decode_bytes, read_up_to

PDF_TYPE = "application/pdf"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MARKDOWN_TYPE = "text/markdown"
_PDFIUM = threading.Lock()  # pdfium is not thread-safe: one document at a time per process


def _doc(text: str, meta: dict, source: InputFile) -> dict:
    return {"id": doc_id(source.key, 0), "text": text, "source": source.name, "meta": meta, "annotations": {}}


def _read_limited(fh, source: InputFile, cfg: InputConfig) -> bytes | Skipped:
    data = read_up_to(fh, cfg.max_record_bytes + 1)
    if len(data) > cfg.max_record_bytes:
        return Skipped(source.name, 0, "too_large", f"file exceeds input.max_record_bytes={cfg.max_record_bytes}",
                       None, source.key)
    return data


# ------------------------------------------------------------------------------------- PDF


def _page_text(raw: str) -> str:
    """pdfium's page text with its line ends as \\n, and the mark it puts where a word was hyphenated at a line
    end (\\x02, or U+FFFE) removed: the word joined again ("manip\\x02ulation" → "manipulation")."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    for mark in ("\x02", "\ufffe"):
        text = text.replace(mark + "\n", "").replace(mark, "")
    return text


def pdf_text(data: bytes) -> tuple[list[str], dict]:
    """(text of each page, document information) of a PDF's bytes; raises pypdfium2's PdfiumError."""
    import pypdfium2 as pdfium

    with _PDFIUM:
        pdf = pdfium.PdfDocument(data)
        try:
            info = pdf.get_metadata_dict(skip_empty=True)
            pages = []
            for i in range(len(pdf)):
                page = pdf[i]
                textpage = page.get_textpage()
                pages.append(_page_text(textpage.get_text_bounded()))
                textpage.close()
                page.close()
        finally:
            pdf.close()
    return pages, info


def parse_pdf(fh, source: InputFile, cfg: InputConfig) -> Iterator[tuple[int, object]]:
    import pypdfium2 as pdfium

    data = _read_limited(fh, source, cfg)
    if isinstance(data, Skipped):
        yield 0, data
        return
    try:
        pages, info = pdf_text(data)
    except pdfium.PdfiumError as err:
        if "password" in str(err).lower():
            yield 0, Quarantined(source.name, 0, "encrypted_pdf", "encrypted PDF: it needs a password to be read",
                                 None, source.key)
        else:
            yield 0, Quarantined(source.name, 0, "unreadable_file", f"not a readable PDF ({err})", None, source.key)
        return
    texts = [page.strip() for page in pages]
    without = sum(1 for t in texts if not t)
    if without == len(texts):
        yield 0, Skipped(source.name, 0, "no_text", f"PDF without a text layer on any of its {len(texts)} page(s) "
                         f"(scanned? no OCR is done)", None, source.key)
        return
    meta = {"content_type": PDF_TYPE, "page_count": len(texts), "pages_without_text": without}
    title = (info.get("Title") or "").strip()
    if title:
        meta["title"] = title
    yield 0, _doc("\n\n".join(t for t in texts if t), meta, source)


# ------------------------------------------------------------------------------------- DOCX


def docx_text(data: bytes) -> tuple[str, str | None]:
    """(text, title) of a DOCX's bytes: body paragraphs and tables in order."""
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(io.BytesIO(data))
    blocks = []
    for child in document.element.body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            text = Paragraph(child, document).text.strip()
            if text:
                blocks.append(text)
        elif tag == "tbl":
            rows = []
            for row in Table(child, document).rows:
                cells, seen = [], set()
                for cell in row.cells:  # a merged cell is listed once per grid column it spans
                    if id(cell._tc) in seen:
                        continue
                    seen.add(id(cell._tc))
                    cells.append(" ".join(cell.text.split()))
                if any(cells):
                    rows.append("\t".join(cells))
            if rows:
                blocks.append("\n".join(rows))
    title = (document.core_properties.title or "").strip() or None
    return "\n\n".join(blocks), title


def parse_docx(fh, source: InputFile, cfg: InputConfig) -> Iterator[tuple[int, object]]:
    data = _read_limited(fh, source, cfg)
    if isinstance(data, Skipped):
        yield 0, data
        return
    try:
        text, title = docx_text(data)
    except Exception as err:  # python-docx reports a bad file as BadZipFile, KeyError, lxml and package errors
        yield 0, Quarantined(source.name, 0, "unreadable_file", f"not a readable DOCX file ({type(err).__name__}: "
                             f"{str(err)[:200]})", None, source.key)
        return
    if not text.strip():
        yield 0, Skipped(source.name, 0, "empty", "DOCX without any text", None, source.key)
        return
    meta = {"content_type": DOCX_TYPE}
    if title:
        meta["title"] = title
    yield 0, _doc(text, meta, source)


# ------------------------------------------------------------------------------------- Markdown


def _front_matter(text: str) -> tuple[str, dict]:
    """(text without its YAML front matter, the front matter as a mapping; empty when it has none)."""
    if not text.startswith("---"):
        return text, {}
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return text, {}
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            try:
                data = yaml.safe_load("\n".join(lines[1:i]))
            except yaml.YAMLError:
                return text, {}
            if data is not None and not isinstance(data, dict):
                # not front matter: a rule, then prose and another rule (a setext heading); its text used to be
                # dropped without a word
                return text, {}
            return "\n".join(lines[i + 1:]), data or {}
    return text, {}


def _inline_text(token) -> str:
    out = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            out.append(child.content)
        elif child.type == "softbreak":
            out.append("\n")
        elif child.type == "hardbreak":
            out.append("\n")
        elif child.type == "image":
            out.append(child.content)  # its alt text
    return "".join(out).strip()


_MD = None


def markdown_text(text: str) -> str:
    """Markdown without markup: blocks in order, joined with a blank line; table rows as lines, cells by tabs."""
    global _MD
    if _MD is None:
        from markdown_it import MarkdownIt

        _MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
    blocks, row, rows = [], None, None
    for token in _MD.parse(text):
        if token.type == "table_open":
            rows = []
        elif token.type == "table_close":
            if rows:
                blocks.append("\n".join(rows))
            rows = None
        elif token.type == "tr_open":
            row = []
        elif token.type == "tr_close":
            if rows is not None and row is not None and any(row):
                rows.append("\t".join(row))
            row = None
        elif token.type == "inline":
            content = _inline_text(token)
            if row is not None:
                row.append(" ".join(content.split()))
            elif content:
                blocks.append(content)
        elif token.type in ("fence", "code_block"):
            code = token.content.rstrip("\n")
            if code.strip():
                blocks.append(code)
    return "\n\n".join(blocks)


def parse_markdown(fh, source: InputFile, cfg: InputConfig) -> Iterator[tuple[int, object]]:
    data = _read_limited(fh, source, cfg)
    if isinstance(data, Skipped):
        yield 0, data
        return
    raw, charset_meta = decode_bytes(data, None, sniff_meta=False)
    body, front = _front_matter(raw)
    text = markdown_text(body)
    if not text.strip():
        yield 0, Skipped(source.name, 0, "empty", "Markdown without any text", None, source.key)
        return
    meta = {"content_type": MARKDOWN_TYPE, **charset_meta}
    title = front.get("title")
    if isinstance(title, str) and title.strip():
        meta["title"] = title.strip()
    yield 0, _doc(text, meta, source)
