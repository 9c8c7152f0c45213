"""What a reader sees, built from result records through `rollout_study.analysis`.

text.py (console), markdown.py (a run's summary.md, README tables), tables.py (DataFrames), figures.py
(PNG figures), notebook.py (the report notebook's blocks, and a sweep's or hazard matrix's summary.md from
them), index.py (the index page). None of them
runs the study: every one reads committed `Result` records only.
"""
