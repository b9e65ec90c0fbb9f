"""A structure-aware protocol fuzzer for kraftpy's two ports, run against a real ``kraftpy dev``.

    python -m tests.fuzz run --seed 7 --frames 100000 --out fuzz-runs/seed-7.json
    python -m tests.fuzz replay --seed 7 --frame 4242        # one frame again, on a fresh target
    python -m tests.fuzz show --seed 7 --frame 4242          # what that frame is, without sending it
    python -m tests.fuzz finding tests/fuzz/findings/X.json  # a kept reproducer, on a fresh target
    python -m tests.fuzz handshakes --seed 1 --attempts 100000  # SASL and TLS handshakes, secured target

Modules: ``frames`` (the frame, the pools of names, lying values), ``kafka_gen`` (Kafka-port
requests from the generated message classes, then mutated), ``batches`` (RecordBatch mutations with
the CRC recomputed), ``control_gen`` (msgpack control-port requests, then mutated), ``target`` (the
``kraftpy dev`` process), ``campaign`` (sending, judging, crash and memory checks), ``verify``
(reading every acknowledged batch back), ``report`` (counts and findings, as text and JSON) and
``known_bugs`` (inputs left out until their fix lands) and ``replay`` (the reproducers kept in
``findings/``). The handshakes: ``secure_target`` (``kraftpy dev`` with SASL_SSL, SASL_PLAINTEXT and
mutual-TLS listeners), ``wire`` (a connection whose TLS records the fuzzer moves itself),
``handshake_gen`` (the attempts) and ``handshake_campaign``. docs/fuzzing.md explains how to use it.
"""
