"""hOCR 1.2: the document as XHTML with ocr_page > ocr_carea > ocr_par > ocr_line > ocrx_word.

Built with lxml so that escaping and well-formedness are the library's job; the file is XHTML
(an XML declaration, the XHTML namespace) so both XML and HTML parsers read it.
"""

from __future__ import annotations

from lxml import etree

from appliance import __version__
from appliance.document import Box, Document, Page
from appliance.outputs.words import int_box, line_words, page_dpi

XHTML_NS = "http://www.w3.org/1999/xhtml"
_DOCTYPE = (
    '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" '
    '"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">'
)
CAPABILITIES = "ocr_page ocr_carea ocr_par ocr_line ocrx_word ocrp_wconf"


def _quote(value: str) -> str:
    """An hOCR string property value: double-quoted, with backslash and quote escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _bbox(box: Box, page: Page) -> str:
    x0, y0, x1, y1 = int_box(box, page.width, page.height)
    return f"bbox {x0} {y0} {x1} {y1}"


def _element(parent: etree._Element, tag: str, css_class: str, ident: str, title: str) -> etree._Element:
    element = etree.SubElement(parent, f"{{{XHTML_NS}}}{tag}")
    element.set("class", css_class)
    element.set("id", ident)
    element.set("title", title)
    return element


def _page(body: etree._Element, page: Page, image_name: str) -> None:
    number = page.index + 1
    dpi = round(page_dpi(page.dpi))
    title = "; ".join(
        [
            f"image {_quote(image_name)}",
            f"bbox 0 0 {page.width} {page.height}",
            f"ppageno {page.index}",
            f"scan_res {dpi} {dpi}",
        ]
    )
    page_element = _element(body, "div", "ocr_page", f"page_{number}", title)
    line_number = word_number = 0
    for block_number, block in enumerate(page.blocks, start=1):
        ident = f"{number}_{block_number}"
        area = _element(page_element, "div", "ocr_carea", f"block_{ident}", _bbox(block.box, page))
        # The model has no paragraphs inside a block yet, so each block is one paragraph.
        paragraph = _element(area, "p", "ocr_par", f"par_{ident}", _bbox(block.box, page))
        for line in block.lines:
            line_number += 1
            line_element = _element(
                paragraph, "span", "ocr_line", f"line_{number}_{line_number}", _bbox(line.box, page)
            )
            words = line_words(line)
            for index, word in enumerate(words):
                word_number += 1
                wconf = round(min(max(word.confidence, 0.0), 1.0) * 100)
                word_element = _element(
                    line_element,
                    "span",
                    "ocrx_word",
                    f"word_{number}_{word_number}",
                    f"{_bbox(word.box, page)}; x_wconf {wconf}",
                )
                word_element.text = word.text
                # A space between words so that the text content reads as the line does.
                if index < len(words) - 1:
                    word_element.tail = " "
            line_element.tail = "\n"


def render_hocr(document: Document) -> bytes:
    html = etree.Element(f"{{{XHTML_NS}}}html", nsmap={None: XHTML_NS})  # type: ignore[dict-item]  # lxml-stubs omit the default namespace key
    html.set("{http://www.w3.org/XML/1998/namespace}lang", "und")
    html.set("lang", "und")  # the pages may mix scripts; "undetermined" is the honest tag
    head = etree.SubElement(html, f"{{{XHTML_NS}}}head")
    etree.SubElement(head, f"{{{XHTML_NS}}}title").text = document.source.name
    metas = {
        "ocr-system": f"ocr-appliance {__version__} ({document.engine.get('name', 'unknown')})",
        "ocr-capabilities": CAPABILITIES,
        "ocr-number-of-pages": str(len(document.pages)),
    }
    content_type = etree.SubElement(head, f"{{{XHTML_NS}}}meta")
    content_type.set("http-equiv", "Content-Type")
    content_type.set("content", "text/html; charset=utf-8")
    for name, content in metas.items():
        meta = etree.SubElement(head, f"{{{XHTML_NS}}}meta")
        meta.set("name", name)
        meta.set("content", content)
    body = etree.SubElement(html, f"{{{XHTML_NS}}}body")
    for page in document.pages:
        _page(body, page, document.source.name)
    data: bytes = etree.tostring(
        html, xml_declaration=True, encoding="UTF-8", doctype=_DOCTYPE, pretty_print=True
    )
    return data
