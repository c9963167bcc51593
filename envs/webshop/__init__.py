"""WebShop: a fully offline re-creation of the WebShop benchmark (Yao et al., 2022).

Kept light: importing the package registers nothing and loads no data; see registration.py
for the gymnasium ids and env.py for the environment.
"""
