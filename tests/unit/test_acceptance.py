"""Served acceptance counting and the alarm (observe/acceptance.py), and which scheduler counts (observe/metrics.py),
with hand-computed figures and stand-ins for SGLang's scheduler (the real one:
tests/engine/test_acceptance_metrics_engine.py).
"""

import logging
from types import SimpleNamespace

import pytest

from sglang_eagle3_capture.observe import acceptance, metrics
from sglang_eagle3_capture.observe.acceptance import Alarm, Settings, Tally


def test_tally_counts_positions_histogram_and_accept_length():
    t = Tally(3)
    for n in (0, 1, 3, 3):
        t.record(n)
    assert t.proposed == [4, 4, 4]
    assert t.accepted == [3, 2, 2]
    assert t.histogram == [1, 1, 0, 2]
    assert t.per_position() == [0.75, 0.5, 0.5]
    assert t.accept_length() == 2.75  # (4 bonus + 7 drafts) / 4 verify steps


def test_tally_clamps_what_a_draft_cannot_have_proposed():
    t = Tally(2)
    t.record(5)
    t.record(-1)
    assert t.histogram == [1, 0, 1] and t.accepted == [1, 1]


def test_since_is_the_difference_and_copy_is_independent():
    t = Tally(2)
    t.record(2)
    mark = t.copy()
    t.record(1)
    t.record(0)
    d = t.since(mark)
    assert (d.proposed, d.accepted, d.histogram) == ([2, 2], [1, 0], [1, 1, 0])
    assert mark.proposed == [1, 1]


def test_a_draft_has_a_position():
    with pytest.raises(ValueError):
        Tally(0)


def test_alarm_fires_once_below_the_margin_and_clears_within_half_of_it():
    alarm = Alarm(0.9, margin=0.2, window=10)
    events = [alarm.observe(i % 2 == 0) for i in range(10)]  # 0.5: below 0.7 once the window is full
    assert events[:9] == [None] * 9 and events[9].firing and events[9].observed == 0.5
    assert all(alarm.observe(False) is None for _ in range(5))  # still firing: no second event
    late = [alarm.observe(True) for _ in range(10)]
    cleared = [e for e in late if e is not None]
    assert len(cleared) == 1 and not cleared[0].firing and cleared[0].observed >= 0.8
    assert not alarm.firing


def test_alarm_stays_quiet_near_the_expected_figure():
    alarm = Alarm(0.75, margin=0.15, window=4)
    steps = [True, True, True, False] * 5  # every window of 4 holds 0.75
    assert [alarm.observe(x) for x in steps] == [None] * 20


def test_the_case_behind_the_package_fires_at_the_first_full_window():
    """74.7% offline, 34.1% served: the default margin and window fire at verify step 200."""
    alarm = Alarm(0.747)
    fired = [i for i in range(400) if (e := alarm.observe((i * 341) % 1000 < 341)) is not None and e.firing]
    assert fired == [acceptance.WINDOW - 1]


def test_alarm_message_names_the_doctor_commands_and_the_figures():
    event = acceptance.AlarmEvent(True, 0.341, 0.747, 0.15, 200)
    text = acceptance.alarm_message(event, "/d", "/t")
    assert "0.341" in text and "0.747" in text
    assert "sglang-eagle3-capture inspect /d --target /t" in text and "sglang-eagle3-capture verify /d" in text


@pytest.mark.parametrize("env, field, value", [
    ({acceptance.LOG_EVERY_ENV: "25"}, "log_every", 25),
    ({acceptance.LOG_EVERY_ENV: "0"}, "log_every", 0),
    ({acceptance.MARGIN_ENV: "0.3"}, "margin", 0.3),
    ({acceptance.WINDOW_ENV: "50"}, "window", 50),
    ({acceptance.METRICS_ENV: "0"}, "enabled", False),
])
def test_settings_read_from_the_environment(env, field, value):
    s = Settings.from_environ(env)
    assert getattr(s, field) == value and s.problems == ()


@pytest.mark.parametrize("env", [{acceptance.WINDOW_ENV: "0"}, {acceptance.MARGIN_ENV: "two"},
                                 {acceptance.LOG_EVERY_ENV: "-1"}, {acceptance.MARGIN_ENV: "1.5"}])
def test_a_setting_that_does_not_read_is_the_default_and_one_problem(env):
    s = Settings.from_environ(env)
    assert (s.log_every, s.margin, s.window) == (acceptance.LOG_EVERY, acceptance.MARGIN, acceptance.WINDOW)
    assert len(s.problems) == 1 and next(iter(env)) in s.problems[0]


def _scheduler(stats_rank=True, enable_metrics=False, algorithm="EAGLE3"):
    collector = SimpleNamespace(labels={"model_name": "m", "tp_rank": 0}) if enable_metrics else None
    context = SimpleNamespace(is_stats_logging_rank=stats_rank, enable_metrics=enable_metrics, collector=collector)
    args = SimpleNamespace(speculative_algorithm=algorithm, speculative_num_steps=2, speculative_eagle_topk=1,
                           speculative_num_draft_tokens=3, speculative_draft_model_path="/nonexistent-draft",
                           model_path="/t", _resolved_overrides=[])
    return SimpleNamespace(metrics_collector_context=context, server_args=args)


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(metrics, "_COUNTER", None)
    monkeypatch.setattr(metrics, "draft_model_path", lambda server_args: server_args.speculative_draft_model_path)
    monkeypatch.delenv(acceptance.METRICS_ENV, raising=False)
    yield
    monkeypatch.setattr(metrics, "_COUNTER", None)


@pytest.mark.parametrize("kwargs", [dict(stats_rank=False), dict(algorithm=None), dict(algorithm="NONE")])
def test_only_the_stats_logging_rank_of_a_speculating_server_counts(fresh, kwargs):
    metrics._after_init(_scheduler(**kwargs))
    assert metrics._COUNTER is None


def test_turned_off_nothing_counts(fresh, monkeypatch):
    monkeypatch.setenv(acceptance.METRICS_ENV, "0")
    metrics._after_init(_scheduler())
    assert metrics._COUNTER is None


def test_without_enable_metrics_it_counts_for_the_log_only(fresh, caplog):
    caplog.set_level(logging.INFO, logger=metrics.__name__)
    caplog.set_level(logging.INFO, logger=acceptance.__name__)  # the alarm's arming is logged there
    metrics._after_init(_scheduler())
    counter = metrics._COUNTER
    assert counter is not None and counter.labels is None
    for n in (2, 0, 1):
        metrics._on_verify(n)
    assert counter.exporter is None and counter.alarm is None  # no manifest at the draft path: no alarm
    assert (counter.tally.proposed, counter.tally.accepted) == ([3, 3], [2, 1])
    assert any("no acceptance alarm: the draft has no manifest" in r.getMessage() for r in caplog.records)


def test_a_failure_while_counting_stops_counting_not_the_server(fresh, caplog):
    metrics._after_init(_scheduler())
    metrics._COUNTER.record = lambda n: (_ for _ in ()).throw(RuntimeError("boom"))
    metrics._on_verify(1)  # must not raise
    assert metrics._COUNTER is None
    assert any("acceptance counting stopped" in r.getMessage() for r in caplog.records)
