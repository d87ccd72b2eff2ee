"""chrome/2ad9387a: a folder "Favorites" on the bookmarks bar: the bookmark manager (chrome://bookmarks,
where the bar's folder is the one selected), Organize > Add new folder, its name, Save."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.browse("chrome://bookmarks", "Bookmarks")
    a.wait("tree-item", "Bookmarks bar", pick=lambda n: n.state("selected"))
    a.click_wait("push-button", "Organize")
    a.click_wait("menu-item", "Add new folder")
    a.click_wait("entry", "Name")
    a.write("Favorites")
    a.click_wait("push-button", "Save")
    a.wait("static", "Favorites")  # the new folder in the list
