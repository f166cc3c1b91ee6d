"""The worker process: a Faust app around :class:`~app.worker.service.TimerService`.

faust_app assembles it (table, tick agent, request reader, rebalance hooks); service
is the orchestration (requests, ticks, durability before acknowledgement); stores,
partition_store and output are where its writes go; faust_internals is the one door to
Faust's and aiokafka's private attributes.
"""
