"""`mlra share`: a run or a batch as one self-contained HTML page that opens anywhere (a
file, a static host, an email attachment) with no server, no network and no mlra, and
that no text of the run can turn against its reader.

text.py escapes, redacts and cuts the run's text; page.py is the frame (the policy, the
style, the script); curves_svg.py draws the curves; transcript.py writes the transcript
and the plan as the log is read; sections.py the parts never cut; run_page.py reads a
run's log once and puts its page together; batch_page.py a batch's page.
"""
