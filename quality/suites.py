"""Great Expectations suites, built in code from the table contracts, and the validation of one partition.

One suite per table (and a freshness suite for tables that have one), held in an ephemeral,
in-memory GX context: no GX project folder, no Data Docs, no analytics. Bounds that depend on
the partition (its day, the time of the check) are GX suite parameters (``{"$PARAMETER": …}``)
filled in per run. Argument names follow the pinned GX 1.24.1 API, which is stricter than some of
its docs (``type_`` not ``type``, ``column_set`` not ``columns``); a unit test builds every
suite against the installed version. Expectations are imported from their own modules because
``great_expectations.expectations`` re-exports them implicitly, which strict mypy refuses.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from typing import Any

import great_expectations as gx
import pandas as pd
from great_expectations.data_context.types.base import (
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)
from great_expectations.expectations.core.expect_column_max_to_be_between import ExpectColumnMaxToBeBetween
from great_expectations.expectations.core.expect_column_pair_values_a_to_be_greater_than_b import (
    ExpectColumnPairValuesAToBeGreaterThanB,
)
from great_expectations.expectations.core.expect_column_values_to_be_between import ExpectColumnValuesToBeBetween
from great_expectations.expectations.core.expect_column_values_to_be_in_set import ExpectColumnValuesToBeInSet
from great_expectations.expectations.core.expect_column_values_to_be_unique import ExpectColumnValuesToBeUnique
from great_expectations.expectations.core.expect_column_values_to_not_be_null import ExpectColumnValuesToNotBeNull
from great_expectations.expectations.core.expect_compound_columns_to_be_unique import ExpectCompoundColumnsToBeUnique
from great_expectations.expectations.core.expect_table_columns_to_match_set import ExpectTableColumnsToMatchSet
from great_expectations.expectations.core.expect_table_row_count_to_be_between import ExpectTableRowCountToBeBetween

from quality.contracts import FORMULA_PREFIXES, Contract, TimeKind
from quality.findings import CheckResult
from tally.settings import QualitySettings

SCHEMA_CHECK = "column types"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_SHOWN_VALUES = 5


def _param(name: str, kind: TimeKind) -> dict[str, str]:
    return {"$PARAMETER": f"{name}_{kind}"}


def _meta(check: str) -> dict[str, str]:
    return {"check": check}


def build_suite(contract: Contract) -> gx.ExpectationSuite:
    """The suite of ``contract``: columns, non-null keys, uniqueness, value ranges, timestamps."""
    suite = gx.ExpectationSuite(name=contract.table)
    add = suite.add_expectation
    add(ExpectTableColumnsToMatchSet(column_set=list(contract.columns), exact_match=False, meta=_meta("columns")))
    for column in (*contract.keys, *contract.not_null):
        add(ExpectColumnValuesToNotBeNull(column=column, meta=_meta(f"{column} not null")))
    unique = f"{', '.join(contract.keys)} unique"
    if len(contract.keys) == 1:
        add(ExpectColumnValuesToBeUnique(column=contract.keys[0], meta=_meta(unique)))
    else:
        add(ExpectCompoundColumnsToBeUnique(column_list=list(contract.keys), meta=_meta(unique)))
    for r in contract.ranges:
        shown = f"{r.column} >= {r.minimum}" if r.maximum is None else f"{r.column} in [{r.minimum}, {r.maximum}]"
        add(ExpectColumnValuesToBeBetween(column=r.column, min_value=r.minimum, max_value=r.maximum, meta=_meta(shown)))
    for column, values in contract.in_sets.items():
        add(ExpectColumnValuesToBeInSet(column=column, value_set=list(values), meta=_meta(f"{column} known")))
    for a, b in contract.at_least:
        add(ExpectColumnPairValuesAToBeGreaterThanB(column_A=a, column_B=b, or_equal=True, meta=_meta(f"{a} >= {b}")))
    if contract.day_column is not None:
        column, kind = contract.day_column
        add(
            ExpectColumnValuesToBeBetween(
                column=column,
                min_value=_param("day_start", kind),
                max_value=_param("day_end", kind),
                meta=_meta(f"{column} within the partition's day"),
            )
        )
    for column, kind in contract.sane_times:
        add(
            ExpectColumnValuesToBeBetween(
                column=column,
                min_value=_param("sane_start", kind),
                max_value=_param("sane_end", kind),
                meta=_meta(f"{column} within sane bounds"),
            )
        )
    return suite


def build_freshness_suite(contract: Contract) -> gx.ExpectationSuite | None:
    """Checks for today's partition only: it has rows, and its newest one is recent."""
    if contract.freshness is None:
        return None
    column, kind = contract.freshness
    suite = gx.ExpectationSuite(name=f"{contract.table}.freshness")
    suite.add_expectation(ExpectTableRowCountToBeBetween(min_value=1, meta=_meta("has rows today")))
    suite.add_expectation(
        ExpectColumnMaxToBeBetween(column=column, min_value=_param("fresh_after", kind), meta=_meta(f"{column} fresh"))
    )
    return suite


def parameters(q: QualitySettings, day: dt.date, now: dt.datetime) -> dict[str, Any]:
    """Suite parameters for one partition: its day and the sane bounds, as epoch ms and timestamps."""
    day_start = dt.datetime.combine(day, dt.time(), dt.UTC)
    sane_start = dt.datetime(q.earliest_year, 1, 1, tzinfo=dt.UTC)
    sane_end = now + dt.timedelta(minutes=q.clock_skew_minutes)
    bounds = {
        "day_start": max(day_start, sane_start),
        "day_end": min(day_start + dt.timedelta(days=1) - dt.timedelta(microseconds=1), sane_end),
        "sane_start": sane_start,
        "sane_end": sane_end,
        "fresh_after": now - dt.timedelta(minutes=q.freshness_minutes),
    }
    values: dict[str, Any] = {}
    for name, moment in bounds.items():
        values[f"{name}_timestamp"] = moment
        values[f"{name}_ms"] = (moment - _EPOCH) // dt.timedelta(milliseconds=1)
    return values


def sent_length(text: pd.Series) -> pd.Series:
    """Characters of each text as sent: the stored length, less a quote ingest put before a formula prefix."""
    stored = text.astype("string")
    quoted = stored.str.startswith(tuple(f"'{prefix}" for prefix in FORMULA_PREFIXES))
    return stored.str.len() - quoted.astype("Int64")


def derive(frame: pd.DataFrame, contract: Contract) -> pd.DataFrame:
    """Add the contract's derived columns (differences, totals, ratios, lengths); a missing source column leaves
    them out."""
    derived = frame.copy(deep=False)
    for d in contract.differences:
        if d.later in frame and d.earlier in frame:
            difference = frame[d.later] - frame[d.earlier]
            if pd.api.types.is_timedelta64_dtype(difference):
                difference = difference.dt.total_seconds()
            derived[d.name] = difference
    for total in contract.totals:
        if all(part in frame for part in total.parts):
            derived[total.name] = sum((frame[part] for part in total.parts), start=pd.Series(0, index=frame.index))
    for ratio in contract.ratios:
        if ratio.numerator in frame and ratio.denominator in frame:
            denominator = frame[ratio.denominator].astype("float64")
            derived[ratio.name] = frame[ratio.numerator].astype("float64") / denominator.where(denominator != 0)
    for length in contract.sent_lengths:
        if length.text in frame:
            derived[length.name] = sent_length(frame[length.text])
    return derived


def schema_result(contract: Contract, day: dt.date, delta_types: Mapping[str, str]) -> CheckResult:
    """The table's Delta column types against the contract (GX sees pandas types, which blur them)."""
    wrong = {
        name: f"{delta_types[name]}, expected {expected}"
        for name, expected in contract.columns.items()
        if name in delta_types and delta_types[name] != expected
    }
    return CheckResult(
        contract.table,
        day,
        contract.table,
        SCHEMA_CHECK,
        "delta schema",
        None,
        not wrong,
        len(wrong) or None,
        _json(wrong),
    )


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _plain(value: Any) -> Any:
    """A value as JSON can hold it: NaN (pandas' missing value) becomes null."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _exception_message(info: Mapping[str, Any]) -> str | None:
    """The message of an exception GX caught while checking (flat, or nested per metric)."""
    if info.get("raised_exception"):
        return str(info.get("exception_message"))
    nested = (_exception_message(v) for v in info.values() if isinstance(v, Mapping))
    return next((m for m in nested if m is not None), None)


def _observed(result: Mapping[str, Any], exception: Mapping[str, Any] | None, missing_column: str | None) -> str:
    if missing_column is not None:
        return _json({"missing_column": missing_column})
    error = _exception_message(exception or {})
    if error is not None:
        return _json({"error": error})
    if "partial_unexpected_list" in result:
        return _json({"unexpected": [_plain(v) for v in list(result["partial_unexpected_list"])[:_SHOWN_VALUES]]})
    if "details" in result:
        return _json({"observed": result.get("observed_value"), **result["details"]})
    return _json({"observed": result.get("observed_value")})


class SuiteRunner:
    """An ephemeral GX context holding one validation definition per suite, created on first use."""

    def __init__(self, quality: QualitySettings) -> None:
        self.quality = quality
        config = DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
            analytics_enabled=False,
            progress_bars=ProgressBarsConfig(globally=False),
        )
        self._context = gx.get_context(project_config=config, mode="ephemeral")
        self._source = self._context.data_sources.add_pandas("tally")
        self._definitions: dict[str, gx.ValidationDefinition] = {}

    def _definition(self, contract: Contract, name: str) -> gx.ValidationDefinition:
        if name not in self._definitions:
            suite = build_suite(contract) if name == contract.table else build_freshness_suite(contract)
            assert suite is not None and suite.name == name, f"no suite {name!r} for {contract.table}"
            batch = self._source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("partition")
            definition = gx.ValidationDefinition(name=name, data=batch, suite=self._context.suites.add(suite))
            self._definitions[name] = self._context.validation_definitions.add(definition)
        return self._definitions[name]

    def validate(self, contract: Contract, day: dt.date, frame: pd.DataFrame, *, now: dt.datetime) -> list[CheckResult]:
        """Run the table's suite (and, for today's partition, its freshness suite) on one partition."""
        names = [contract.table]
        if contract.freshness is not None and self.quality.freshness_minutes and day == now.date():
            names.append(f"{contract.table}.freshness")
        frame = derive(frame, contract)
        values = parameters(self.quality, day, now)
        results: list[CheckResult] = []
        for name in names:
            run = self._definition(contract, name).run(
                batch_parameters={"dataframe": frame}, expectation_parameters=values, result_format="SUMMARY"
            )
            for r in run.results:
                config = r.expectation_config
                assert config is not None, "GX returned a result without its expectation"
                column = config.kwargs.get("column")
                missing = column if column is not None and column not in frame.columns else None
                count = r.result.get("unexpected_count")
                results.append(
                    CheckResult(
                        table=contract.table,
                        partition_date=day,
                        suite=name,
                        check=str((config.meta or {}).get("check", config.type)),
                        expectation=config.type,
                        column=column,
                        success=bool(r.success),
                        unexpected_count=None if count is None else int(count),
                        observed=_observed(r.result, r.exception_info, missing),
                    )
                )
        return results
