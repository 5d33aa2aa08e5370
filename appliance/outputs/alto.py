"""ALTO 4 (v4.2 namespace): pages, print space, text blocks, lines, strings and spaces in pixels.

Built with lxml; the element order and required attributes follow the ALTO 4.2 schema
(Description > MeasurementUnit, sourceImageInformation, OCRProcessing; Layout > Page >
PrintSpace > TextBlock > TextLine > String/SP).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lxml import etree

from appliance import __version__
from appliance.document import Box, Document, Page, union_box
from appliance.outputs.words import int_box, line_words

ALTO_NS = "http://www.loc.gov/standards/alto/ns-v4#"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"
SCHEMA_LOCATION = f"{ALTO_NS} http://www.loc.gov/alto/v4/alto-4-2.xsd"
SCHEMA_VERSION = "4.2"


def _sub(parent: etree._Element, tag: str, text: str | None = None, **attributes: str) -> etree._Element:
    element = etree.SubElement(parent, f"{{{ALTO_NS}}}{tag}")
    for name, value in attributes.items():
        element.set(name, value)
    if text is not None:
        element.text = text
    return element


def _geometry(box: Box, page: Page) -> dict[str, str]:
    x0, y0, x1, y1 = int_box(box, page.width, page.height)
    return {"HPOS": str(x0), "VPOS": str(y0), "WIDTH": str(x1 - x0), "HEIGHT": str(y1 - y0)}


def _model_settings(engine: dict[str, Any]) -> str:
    """One line per model: role, name, sha256 and the provider it ran on."""
    lines = [f"engine={engine.get('name', 'unknown')} manifest={engine.get('manifest', '')}"]
    for model in engine.get("models", []):
        lines.append(
            f"{model.get('role')}={model.get('name')} sha256={model.get('sha256')}"
            f" provider={model.get('provider') or 'n/a'}"
        )
    return "\n".join(lines)


def _description(root: etree._Element, document: Document) -> None:
    description = _sub(root, "Description")
    _sub(description, "MeasurementUnit", "pixel")
    source = _sub(description, "sourceImageInformation")
    _sub(source, "fileName", document.source.name)
    _sub(source, "fileIdentifier", document.source.sha256, fileIdentifierLocation="sha256")
    processing = _sub(description, "OCRProcessing", ID="OCR_0")
    step = _sub(processing, "ocrProcessingStep")
    created = document.created or datetime.now(UTC).isoformat(timespec="seconds")
    _sub(step, "processingDateTime", created)
    _sub(step, "processingStepSettings", _model_settings(document.engine))
    software = _sub(step, "processingSoftware")
    _sub(software, "softwareName", "ocr-appliance")
    _sub(software, "softwareVersion", document.appliance_version or __version__)
    _sub(software, "applicationDescription", f"engine {document.engine.get('name', 'unknown')}")


def _page(layout: etree._Element, page: Page) -> None:
    number = page.index + 1
    page_element = _sub(
        layout,
        "Page",
        ID=f"page_{number}",
        PHYSICAL_IMG_NR=str(number),
        WIDTH=str(page.width),
        HEIGHT=str(page.height),
    )
    if page.blocks:
        print_space = _sub(
            page_element, "PrintSpace", **_geometry(union_box([block.box for block in page.blocks]), page)
        )
    else:
        print_space = _sub(page_element, "PrintSpace", HPOS="0", VPOS="0", WIDTH="0", HEIGHT="0")
    line_number = word_number = 0
    for block_number, block in enumerate(page.blocks, start=1):
        block_element = _sub(
            print_space, "TextBlock", ID=f"block_{number}_{block_number}", **_geometry(block.box, page)
        )
        for line in block.lines:
            line_number += 1
            line_element = _sub(
                block_element, "TextLine", ID=f"line_{number}_{line_number}", **_geometry(line.box, page)
            )
            words = [word for word in line_words(line) if word.text]
            for index, word in enumerate(words):
                word_number += 1
                geometry = _geometry(word.box, page)
                wc = min(max(word.confidence, 0.0), 1.0)
                _sub(
                    line_element,
                    "String",
                    ID=f"string_{number}_{word_number}",
                    CONTENT=word.text,
                    WC=f"{wc:.4f}",
                    **geometry,
                )
                if index < len(words) - 1:
                    # SP spans the gap up to the next word, so readers can rebuild the spacing.
                    right = int(geometry["HPOS"]) + int(geometry["WIDTH"])
                    next_left = int_box(words[index + 1].box, page.width, page.height)[0]
                    _sub(
                        line_element,
                        "SP",
                        HPOS=str(right),
                        VPOS=geometry["VPOS"],
                        WIDTH=str(max(next_left - right, 0)),
                    )


def render_alto(document: Document) -> bytes:
    root = etree.Element(f"{{{ALTO_NS}}}alto", nsmap={None: ALTO_NS, "xsi": XSI_NS})  # type: ignore[dict-item]  # lxml-stubs omit the default namespace key
    root.set(f"{{{XSI_NS}}}schemaLocation", SCHEMA_LOCATION)
    root.set("SCHEMAVERSION", SCHEMA_VERSION)
    _description(root, document)
    layout = _sub(root, "Layout")
    for page in document.pages:
        _page(layout, page)
    data: bytes = etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True)
    return data
