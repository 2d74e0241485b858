"""stub"""
def add_parser(sub, name):
    p = sub.add_parser(name, help="write a ready backend plugin package")
    p.set_defaults(func=lambda a: 2)
