"""The servo console: a local web page that shows every node on the bus, plots the servos live, tables and edits
their registers, and (with ``--allow-motion``) moves them while a person holds a control (``servo-node console``).

:mod:`._bus` is the console's pycyphal node (nodes, servos, axes, status); :mod:`._streams` the live data and the
recording (the scope's CSV); :mod:`._registers` the register tables, writes, export and import (:mod:`._values`:
their values and file, pure); :mod:`._motion` the holds, arming and re-arming; :mod:`._security` the checks every
request passes; :mod:`._app` the routes and WebSockets (aiohttp); :mod:`._cmd` the command line; ``static/`` the
page, its script and the chart library (uPlot, with its licence). Importing this package imports neither aiohttp
nor pycyphal's generated types: aiohttp is the optional ``console`` extra.
"""
