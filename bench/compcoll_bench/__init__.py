"""The lab: the ``compcoll`` command (``bench.cli``), its benchmark harnesses
(``bench.commands``), the emulated cluster (``bench.emulate``), forecasts
(``bench.forecast``) and training models. It uses the library (``collectives``,
``compressors``); the library never imports it. Result files and plots live in
``bench/results/`` of the source tree (they do not ship with the package)."""
