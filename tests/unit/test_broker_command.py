"""The bundled broker's command line (and that of the Kafka tools Tally runs) carries
``kafka.java_options`` after Tally's own options, so a setting can change the collector or the JIT
without touching the heap, which ``kafka.heap`` sets."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ops.broker import console_consumer_command
from tally.settings import Settings


def test_the_brokers_own_options_come_first_then_kafka_java_options(settings: Settings) -> None:
    kafka = dataclasses.replace(settings.kafka, java_options='-XX:TieredStopAtLevel=1 -Dtally.note="two words"')
    cmd = console_consumer_command(dataclasses.replace(settings, kafka=kafka), "pageviews")
    assert cmd.index("-XX:+UseG1GC") < cmd.index("-XX:TieredStopAtLevel=1") < cmd.index("-cp")
    assert "-Dtally.note=two words" in cmd, "quoted as a shell would"


def test_no_options_add_no_words(conf_file: Callable[[str], Settings]) -> None:
    settings = conf_file("kafka:\n  heap: 256m\n")
    assert settings.kafka.java_options == ""
    cmd = console_consumer_command(settings, "pageviews")
    assert cmd[1:4] == ["-Xms256m", "-Xmx256m", "-XX:+UseG1GC"] and cmd[4] == "-Djava.awt.headless=true"
