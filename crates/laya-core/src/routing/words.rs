//! Word lists and script ranges of upstream's language detector (laya 0.4.15 `lang.py`).
//!
//! GENERATED, do not edit. `gen_words.py` was, in full (run with python3.11):
//!
//! ```text
//! # Emits crates/laya-core/src/routing/words.rs from laya 0.4.15 lang.py (argv[1]) with python3.11
//! import sys, importlib.util
//! spec = importlib.util.spec_from_file_location("lang", sys.argv[1])
//! lang = importlib.util.module_from_spec(spec); spec.loader.exec_module(lang)
//! def arr(words):
//!     items = ['"%s"' % w for w in sorted(words)]
//!     lines, line = [], "       "
//!     for it in items:
//!         if len(line) + len(it) + 2 > 100:
//!             lines.append(line); line = "       "
//!         line += " " + it + ","
//!     lines.append(line)
//!     return "&[\n" + "\n".join(lines) + "\n    ]"
//! with open(sys.argv[2], "w") as out:
//!     out.write("//! Word lists and script ranges of upstream's language detector (laya 0.4.15 `lang.py`).\n//!\n")
//!     out.write("//! GENERATED, do not edit. `gen_words.py` was, in full (run with python3.11):\n//!\n//! ```text\n")
//!     for l in open(__file__).read().splitlines():
//!         out.write(("//! " + l if l else "//!") + "\n")
//!     out.write("//! ```\n\n")
//!     out.write("/// `_STOP`: function words per language, in upstream's dict order (ties go to the earlier).\n")
//!     out.write("#[rustfmt::skip]\npub(super) static STOP: [(&str, &[&str]); %d] = [\n" % len(lang._STOP))
//!     for lg, ws in lang._STOP.items():
//!         out.write('    ("%s", %s),\n' % (lg, arr(ws).replace("\n", "\n    ")))
//!     out.write("];\n\n/// `_SHORT_SWEDISH_WORDS`.\n#[rustfmt::skip]\npub(super) static SHORT_SWEDISH: &[&str] = %s;\n" % arr(lang._SHORT_SWEDISH_WORDS).replace("\n    ]", "\n]"))
//!     out.write("\n/// `_NORDIC_OVERLAP_WORDS`.\n#[rustfmt::skip]\npub(super) static NORDIC_OVERLAP: &[&str] = %s;\n" % arr(lang._NORDIC_OVERLAP_WORDS).replace("\n    ]", "\n]"))
//!     out.write('\n/// `_NON_EN_DIACRITICS`, as one string of its characters (sorted).\npub(super) static NON_EN_DIACRITICS: &str = "%s";\n' % "".join(sorted(lang._NON_EN_DIACRITICS)))
//!     flat = sorted((lo, hi, sc) for sc, rs in lang._SCRIPT_RANGES for lo, hi in rs)
//!     assert [(lo, hi, sc) for lo, hi, sc in flat] == list(lang._FLATTENED_RANGES)
//!     out.write("\n/// `_SCRIPT_RANGES` flattened: `(first, last, script)`, sorted by first code point.\n#[rustfmt::skip]\npub(super) static SCRIPT_RANGES: [(u32, u32, &str); %d] = [\n" % len(flat))
//!     for lo, hi, sc in flat:
//!         out.write('    (0x%04X, 0x%04X, "%s"),\n' % (lo, hi, sc))
//!     out.write("];\n")
//!     out.write("\n/// `_EN_COLLISION_WORDS` before upstream intersects it with the non-English lists.\n#[rustfmt::skip]\npub(super) static EN_COLLISION_CANDIDATES: &[&str] = %s;\n" % arr({"come", "son", "do", "care", "todo", "im", "per", "plus"}).replace("\n    ]", "\n]"))
//! ```

/// `_STOP`: function words per language, in upstream's dict order (ties go to the earlier).
#[rustfmt::skip]
pub(super) static STOP: [(&str, &[&str]); 11] = [
    ("en", &[
            "after", "already", "always", "and", "any", "are", "aren", "as", "at", "be", "because",
            "been", "before", "being", "between", "both", "but", "can", "could", "couldn", "didn",
            "didnt", "does", "doesn", "doesnt", "doing", "done", "dont", "down", "during", "each",
            "ever", "every", "few", "for", "from", "has", "hasn", "have", "haven", "havent", "here",
            "him", "his", "how", "i", "if", "in", "into", "is", "isn", "isnt", "it", "ive", "many",
            "might", "much", "must", "never", "nor", "not", "of", "on", "only", "onto", "our", "please",
            "shall", "she", "should", "some", "than", "that", "thats", "the", "their", "them", "then",
            "there", "these", "they", "this", "those", "through", "to", "too", "until", "very", "was",
            "wasn", "wasnt", "we", "were", "weren", "what", "whats", "when", "where", "which", "while",
            "who", "whom", "why", "will", "with", "within", "without", "won", "wont", "would", "wouldn",
            "yet", "you", "your", "youre", "yours",
        ]),
    ("fr", &[
            "alors", "au", "aux", "avec", "bien", "bonjour", "ce", "ces", "cette", "comment", "dans",
            "des", "deux", "dois", "doit", "donc", "du", "elle", "elles", "est", "et", "fait", "fois",
            "il", "ils", "je", "jour", "jours", "la", "le", "les", "ma", "mais", "merci", "mes", "mois",
            "mon", "nous", "ont", "ou", "pas", "peut", "peux", "plus", "pour", "pourquoi", "quand",
            "que", "qui", "sa", "ses", "sont", "sur", "ta", "tes", "ton", "tous", "tout", "toute",
            "trois", "très", "tu", "une", "veut", "veux", "vous", "être",
        ]),
    ("de", &[
            "aber", "auch", "auf", "aus", "bei", "bitte", "das", "dem", "den", "der", "dich", "die",
            "diese", "diesen", "dieser", "dieses", "dir", "ein", "eine", "einem", "einen", "einer",
            "für", "gibt", "habe", "haben", "heute", "ich", "im", "in", "ist", "jetzt", "kann",
            "kannst", "mein", "meine", "meinem", "meinen", "meiner", "mich", "mir", "mit", "nach",
            "nicht", "noch", "oder", "sich", "sind", "und", "uns", "von", "wann", "was", "welche",
            "werden", "wie", "wir", "wird", "wo", "wurde", "zu", "zum", "zur",
        ]),
    ("es", &[
            "al", "algo", "aquí", "aunque", "como", "con", "cuando", "del", "donde", "dos", "el",
            "entre", "es", "esa", "ese", "eso", "esta", "este", "esto", "está", "fue", "fueron",
            "gracias", "han", "hay", "hemos", "hoy", "la", "las", "le", "les", "lo", "los", "mi", "muy",
            "más", "nada", "necesito", "ni", "nos", "para", "pero", "por", "porque", "puede", "pueden",
            "que", "quiero", "se", "ser", "sobre", "son", "su", "sus", "también", "tengo", "tiene",
            "tienen", "todo", "tres", "tu", "un", "una", "y", "ya",
        ]),
    ("pt", &[
            "agora", "ainda", "alguem", "alguém", "ali", "antes", "ao", "aos", "aqui", "as", "até",
            "boa", "cadê", "com", "como", "consigo", "da", "das", "depois", "deu", "do", "dois", "dos",
            "e", "em", "entao", "então", "era", "esta", "estamos", "estava", "este", "estou", "está",
            "eu", "ficou", "fiz", "foi", "gostaria", "hoje", "isso", "isto", "ja", "já", "mais", "mas",
            "meu", "meus", "minha", "minhas", "muito", "na", "nada", "nao", "nas", "nenhum", "nenhuma",
            "ninguem", "ninguém", "noite", "nos", "nossa", "nosso", "não", "o", "obrigada", "obrigado",
            "olá", "onde", "ontem", "os", "para", "pela", "pelo", "pode", "podem", "por", "porque",
            "pra", "preciso", "quando", "que", "quero", "sao", "se", "ser", "seu", "sou", "sua", "são",
            "tambem", "também", "tarde", "tem", "tenho", "três", "tudo", "tá", "um", "uma", "vc", "vcs",
            "voce", "voces", "você", "vocês", "é",
        ]),
    ("it", &[
            "abbiamo", "adesso", "agli", "alla", "alle", "anche", "ancora", "avete", "che", "ci",
            "ciao", "col", "come", "con", "da", "dagli", "dal", "dalla", "dallo", "degli", "dei", "del",
            "della", "delle", "dello", "deve", "devo", "devono", "di", "dove", "e", "ed", "era", "fra",
            "già", "gli", "grazie", "ha", "hai", "hanno", "ho", "ieri", "il", "la", "le", "lo", "mai",
            "mi", "mia", "mio", "molto", "ne", "negli", "nel", "nell", "nella", "non", "o", "oggi",
            "per", "perche", "più", "poco", "quando", "questa", "questo", "scusa", "sempre", "si",
            "sono", "stata", "stato", "su", "sua", "sul", "sulla", "sulle", "tra", "tuo", "un", "una",
            "uno", "voglio", "vorrei", "è",
        ]),
    ("nl", &[
            "aan", "dat", "deze", "door", "een", "het", "is", "maar", "met", "naar", "niet", "ook",
            "op", "te", "van", "voor", "worden", "wordt", "zijn",
        ]),
    ("sv", &[
            "appen", "aterbetala", "aterbetalning", "att", "behover", "behöver", "blivit", "debiterade",
            "dessa", "detta", "faktura", "fel", "från", "får", "ganger", "gång", "gånger", "gör",
            "göra", "hittar", "hjalp", "hjalpa", "hjälp", "hjälpa", "här", "installningarna",
            "installningen", "inställningarna", "inställningen", "inte", "jag", "kommer", "kraschar",
            "kvittot", "losenord", "lösenord", "mig", "min", "mitt", "måste", "nar", "när", "nästa",
            "och", "också", "om", "oppnar", "paket", "ska", "skicka", "skulle", "sparningen",
            "spårningen", "säger", "till", "tva", "två", "upp", "uppdaterats", "utan", "vi", "vill",
            "är", "återbetala", "återbetalning", "öppnar",
        ]),
    ("ro", &[
            "aceasta", "această", "acest", "acesta", "acum", "ale", "care", "dar", "din", "după",
            "este", "foarte", "fost", "fără", "lui", "mi", "nu", "pentru", "până", "sunt", "să",
            "trebuie", "vreau", "vă", "în", "și", "ți",
        ]),
    ("bn", &[
            "abar", "ajke", "akhon", "amader", "amake", "amar", "ami", "amra", "apnake", "apnar",
            "apnara", "apni", "ar", "asbe", "bhai", "bhalo", "bolte", "bolun", "chai", "chaina",
            "dhonnobad", "dilam", "dite", "diye", "diyechi", "dorkar", "duibar", "ei", "eita", "ekbar",
            "ekhon", "ekhono", "ekta", "ferot", "geche", "gese", "hobe", "hocche", "hoise", "hoye",
            "hoyeche", "hoyni", "jabe", "jodi", "jonno", "kalke", "keno", "keu", "kharap", "khub", "ki",
            "kibhabe", "kichu", "kintu", "kivabe", "kobe", "kokhon", "korbo", "korchi", "kore",
            "koreche", "korechi", "koren", "korlam", "korsi", "korte", "korun", "kothay", "koto",
            "lagbe", "moddhe", "nai", "niye", "oi", "oita", "onek", "ota", "pabo", "paini", "parben",
            "parbo", "parchi", "parchina", "peyechi", "sathe", "shathe", "shob", "shomossa", "somossa",
            "tader", "tahole", "taka", "theke", "tomake", "tomar", "tomra", "tumi", "valo",
        ]),
    ("az", &[
            "amma", "ancaq", "artiq", "artıq", "bir", "biz", "bu", "cox", "daha", "deyil", "də", "eger",
            "görə", "həm", "hər", "ile", "ilə", "isə", "kimi", "lakin", "mən", "nə", "olan", "olmasa",
            "olub", "onlar", "siz", "sonra", "sən", "ucun", "var", "ve", "və", "yalniz", "yalnız",
            "yox", "yoxdur", "çox", "üçün", "əgər",
        ]),
];

/// `_SHORT_SWEDISH_WORDS`.
#[rustfmt::skip]
pub(super) static SHORT_SWEDISH: &[&str] = &[
        "abonnemanget", "aterbetalning", "atkomst", "behover", "behöver", "betalningen", "fakturan",
        "felmeddelande", "glomt", "glömt", "inloggningen", "installningen", "inställningen",
        "kvitto", "kvittot", "losenord", "lösenord", "sparningen", "spårningen", "återbetalning",
        "åtkomst",
];

/// `_NORDIC_OVERLAP_WORDS`.
#[rustfmt::skip]
pub(super) static NORDIC_OVERLAP: &[&str] = &[
        "får", "hej", "ja", "jo", "kommer", "mig", "min", "nej", "om", "skulle", "tack", "vi",
];

/// `_NON_EN_DIACRITICS`, as one string of its characters (sorted).
pub(super) static NON_EN_DIACRITICS: &str =
    "ßàáâãäåæçèéêëìíîïñòóôõöøùúûüýÿāăąćčďđēęěğģīıķļłńņňőœřśşšţťūůűźżžșțə";

/// `_SCRIPT_RANGES` flattened: `(first, last, script)`, sorted by first code point.
#[rustfmt::skip]
pub(super) static SCRIPT_RANGES: [(u32, u32, &str); 39] = [
    (0x0370, 0x03FF, "greek"),
    (0x0400, 0x052F, "cyrillic"),
    (0x0530, 0x058F, "armenian"),
    (0x0590, 0x05FF, "hebrew"),
    (0x0600, 0x06FF, "arabic"),
    (0x0750, 0x077F, "arabic"),
    (0x08A0, 0x08FF, "arabic"),
    (0x0900, 0x097F, "devanagari"),
    (0x0980, 0x09FF, "bengali"),
    (0x0A00, 0x0A7F, "gurmukhi"),
    (0x0A80, 0x0AFF, "gujarati"),
    (0x0B00, 0x0B7F, "oriya"),
    (0x0B80, 0x0BFF, "tamil"),
    (0x0C00, 0x0C7F, "telugu"),
    (0x0C80, 0x0CFF, "kannada"),
    (0x0D00, 0x0D7F, "malayalam"),
    (0x0D80, 0x0DFF, "sinhala"),
    (0x0E00, 0x0E7F, "thai"),
    (0x0E80, 0x0EFF, "lao"),
    (0x0F00, 0x0FFF, "tibetan"),
    (0x1000, 0x109F, "myanmar"),
    (0x10A0, 0x10FF, "georgian"),
    (0x1100, 0x11FF, "hangul"),
    (0x1200, 0x137F, "ethiopic"),
    (0x1780, 0x17FF, "khmer"),
    (0x1F00, 0x1FFF, "greek"),
    (0x2DE0, 0x2DFF, "cyrillic"),
    (0x3040, 0x309F, "kana"),
    (0x30A0, 0x30FF, "kana"),
    (0x3130, 0x318F, "hangul"),
    (0x31F0, 0x31FF, "kana"),
    (0x3400, 0x4DBF, "han"),
    (0x4E00, 0x9FFF, "han"),
    (0xA640, 0xA69F, "cyrillic"),
    (0xA8E0, 0xA8FF, "devanagari"),
    (0xAC00, 0xD7AF, "hangul"),
    (0xF900, 0xFAFF, "han"),
    (0xFB50, 0xFDFF, "arabic"),
    (0xFE70, 0xFEFF, "arabic"),
];

/// `_EN_COLLISION_WORDS` before upstream intersects it with the non-English lists.
#[rustfmt::skip]
pub(super) static EN_COLLISION_CANDIDATES: &[&str] = &[
        "care", "come", "do", "im", "per", "plus", "son", "todo",
];
