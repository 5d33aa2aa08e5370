"""The receipt classifier: receipt fields only on pages whose text reads as a receipt."""

from __future__ import annotations

from appliance.config import RepairConfig, parse_config
from appliance.fields.classify import receipt_score
from appliance.outputs.json_result import validate_result
from appliance.repair.step import repair_document
from tests.test_fields_receipt import RECEIPT, _document

# A manual page as a reader gives it: a running head with a page counter, numbered sections whose
# numbers look like amounts at line ends, long lines of prose.
MANUAL_PAGE = [
    ["软件包管理手册 16/223"],
    ["第 2 章 软件包管理 1.11"],
    ["本章介绍如何安装、升级和删除软件包，以及如何查询系统中已经安装的软件包的信息和依赖关系。"],
    ["软件包管理系统会记录每个文件属于哪个软件包，因此删除软件包时不会留下无用的文件。"],
    ["2.1 基本概念 2.10"],
    ["在开始之前，请确认您拥有管理员权限，并且系统的软件源已经正确配置，可以正常访问。"],
    ["The package manager keeps a database of every installed file and the package it came from, so"],
    ["removing a package never leaves stray files behind; see section 2.3 for the details 3.15"],
]

LETTER = [
    ["Dear customer,"],
    ["Thank you for your letter of 5 March 2024 about the delivery of your new washing machine."],
    ["We are sorry that the machine arrived late and that our driver could not carry it upstairs."],
    ["A technician will call you this week to arrange a visit at a time that suits you."],
    ["Yours sincerely,"],
]


def test_a_receipt_scores_high_and_prose_low() -> None:
    assert receipt_score(_document(RECEIPT)).score >= 0.8
    manual = receipt_score(_document(MANUAL_PAGE))
    assert manual.score < RepairConfig().receipt_min_score
    assert manual.signals["keywords"] == 0
    assert receipt_score(_document(LETTER)).score < RepairConfig().receipt_min_score


def test_a_manual_page_gets_no_receipt_fields_and_says_why() -> None:
    document = _document(MANUAL_PAGE)
    repair_document(document, RepairConfig())
    assert document.fields == {}
    assert document.repairs is not None
    notes = [change for change in document.repairs.changes if change.rule_id == "fields.not_receipt"]
    assert len(notes) == 1 and notes[0].after.startswith("receipt score ")
    validate_result(document.to_dict())  # the note is a repair like any other in the result


def test_without_the_classifier_every_page_gets_receipt_fields() -> None:
    document = _document(MANUAL_PAGE)
    repair_document(document, RepairConfig(receipt_min_score=0))
    assert "company" in document.fields


def test_a_chinese_invoice_is_a_receipt() -> None:
    rows = [
        ["北京某某商贸有限公司"],
        ["发票号码：12345678"],
        ["日期：2024年3月5日"],
        ["办公用纸", "2", "50.00", "100.00"],
        ["税额", "6.00"],
        ["合计", "¥106.00"],
    ]
    document = _document(rows)
    repair_document(document, RepairConfig(locale="zh-CN"))
    assert document.fields["total"].value == "106.00"


def test_a_till_fragment_is_a_receipt_and_a_table_of_numbers_is_not() -> None:
    minimum = RepairConfig().receipt_min_score
    assert receipt_score(_document([["TOTAL", "40.17"]])).score >= minimum
    index = [["Chapter 1", "1.10"], ["Chapter 2", "2.15"], ["Printed 05/03/2024"], ["Chapter 3", "3.20"]]
    assert receipt_score(_document(index)).score < minimum


def test_a_hot_folder_profile_overrides_the_classifier() -> None:
    config = parse_config(
        {
            "profiles": {
                "receipts": {"receipt_min_score": 0.0},
                "contracts": {"field_profile": "none"},
            }
        }
    )
    assert config.repair_for("default") == config.repair
    assert config.repair_for("receipts").receipt_min_score == 0
    assert config.repair_for("contracts").field_profile == "none"
    document = _document(MANUAL_PAGE)
    repair_document(document, config.repair_for("receipts"))
    assert "company" in document.fields  # a receipts-only folder takes fields from every page
    document = _document(RECEIPT)
    repair_document(document, config.repair_for("contracts"))
    assert document.fields == {}
